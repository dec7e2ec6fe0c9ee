"""`bridges.pi` without pi: the handshake, the reference's wording, and the legible refusals of a host without a
usable pi (pi missing, node too old). The bridge runs in-process; pi itself is the live tests'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bbridge.wire import rpc
from bridges.pi import launch, maintenance
from bridges.pi.bridge import PiBridge
from tests.support import FULL, INIT, in_process, spawned

THREAD = "thr_pi"


def start(cwd: Path) -> dict[str, object]:
    return {"threadId": THREAD, "cwd": str(cwd), "options": FULL}


async def test_the_handshake_advertises_the_reference_capabilities() -> None:  # [M1]
    async with spawned([sys.executable, "-m", "bridges.pi"]) as child:
        result = await child.runtime.call("initialize", INIT)
        assert json.dumps(result, separators=(",", ":")) == (
            '{"protocolVersion":2,"capabilities":{"sessionRestore":true,"threadArchive":false,"threadRename":false,'
            '"threadGoalClear":false,"fork":"checkpoint","approvalEnforcedBy":"runtime","grammarVersions":[3,3],'
            '"steerMode":"inject"}}'
        )
        unknown = await child.runtime.error(
            "thread/name/set", {"threadId": THREAD, "providerThreadId": "p", "title": "x"}
        )
        assert (unknown.code, unknown.message) == (rpc.METHOD_NOT_FOUND, 'Unknown method "thread/name/set"')
        invalid = await child.runtime.error("thread/stop", {"threadId": THREAD})
        assert invalid.code == rpc.INVALID_PARAMS and invalid.message.startswith('Invalid params for "thread/stop": ')
        assert await child.finish() == 0
    assert 'pi bridge: Unknown method "thread/name/set"' in child.stderr.decode().splitlines()


async def test_turns_need_a_session_and_text(tmp_path: Path) -> None:  # [M12], [M15]
    async with in_process(PiBridge({"PATH": str(tmp_path)}).bridge) as runtime:
        await runtime.call("initialize", INIT)
        turn = {
            "threadId": THREAD,
            "providerThreadId": THREAD,
            "input": [],
            "clientRequestId": "creq_abcdefghjk",
            "options": FULL,
        }
        assert (await runtime.error("turn/start", turn)).message == "No active pi session"
        stop = {"threadId": THREAD, "providerThreadId": THREAD, "intent": "interrupt", "activeTurnId": None}
        assert await runtime.call("thread/stop", stop) == {"ok": True, "providerCheckpointId": None}
        assert await runtime.call("provider/usage", {"providerId": "pi"}) == {"supported": False}
        assert await runtime.call("skills/configure", {"roots": [{"id": "r", "path": "/skills", "skills": []}]}) == {
            "ok": True
        }


async def test_a_missing_pi_is_a_legible_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "CACHE_CLI", tmp_path / "no-cli.js")
    async with in_process(PiBridge({"PATH": str(tmp_path), "HOME": str(tmp_path)}).bridge) as runtime:
        await runtime.call("initialize", INIT)
        error = await runtime.error("thread/start", start(tmp_path))
        assert (error.code, error.message) == (rpc.BRIDGE_ERROR, launch.MISSING_PI)
        assert not [m for what, m, _ in runtime.log if m == "thread/identity"]


async def test_a_node_too_old_for_pi_is_a_legible_refusal(tmp_path: Path) -> None:
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\necho v20.20.2\n")
    node.chmod(0o755)
    (tmp_path / "cli.js").write_text("")
    env = {
        "PATH": str(tmp_path),
        "HOME": str(tmp_path),
        launch.NODE_ENV: str(node),
        launch.CLI_ENV: str(tmp_path / "cli.js"),
    }
    async with in_process(PiBridge(env).bridge) as runtime:
        await runtime.call("initialize", INIT)
        error = await runtime.error("thread/start", start(tmp_path))
        assert error.message == f"pi needs node >= 22.19, but {node} is 20.20; install node 22 or set BB_PI_NODE."


def test_pis_login_advice_says_how_to_follow_it_through_bbridge() -> None:
    """pi's words stay as pi wrote them; the bbridge way follows (issue 31): no terminal for /login here."""
    pis = "No API key found for anthropic.\n\nUse /login to log into a provider via OAuth or API key. See:\n  /d/x.md"
    advised = launch.through_bbridge(pis)
    assert advised.startswith(pis + "\n\nThrough bbridge pi has no terminal, so /login cannot run here")
    assert "$PI_CODING_AGENT_DIR, default ~/.pi/agent" in advised and "[providers.pi]" in advised
    assert launch.through_bbridge("Agent is already processing.") == "Agent is already processing."


FAKE_PI = """import json, sys
for line in sys.stdin:
    command = json.loads(line)
    print(json.dumps({"type": "response", "id": command["id"], "command": command["type"], "success": True,
                      "data": {"models": []}}), flush=True)
"""


async def test_health_is_whether_pi_lists_a_model(tmp_path: Path) -> None:  # [M6], [M7], [D3]
    """Health asks a throwaway pi for its models: none is unauthenticated, a pi that cannot start is unknown;
    the installation methods stay unknown."""
    (tmp_path / "pi.py").write_text(FAKE_PI)
    listing = {"HOME": str(tmp_path), launch.COMMAND_ENV: sys.executable, launch.ARGS_ENV: json.dumps(["pi.py"])}
    missing = {"HOME": str(tmp_path), launch.COMMAND_ENV: str(tmp_path / "no-pi")}
    probe = {"providerId": "pi", "cwd": str(tmp_path)}
    async with in_process(PiBridge(listing).bridge) as runtime:
        await runtime.call("initialize", INIT)
        health = (await runtime.call("provider/health", probe))["health"]
        assert (health["status"], health["statusMessage"]) == ("unauthenticated", maintenance.NO_MODELS)
        assert await runtime.call("model/list", probe) == {"models": [], "selectedOnlyModels": []}
        unknown = await runtime.error("provider/installation/status", {"providerId": "pi"})
        assert unknown.message == 'Unknown method "provider/installation/status"'
    async with in_process(PiBridge(missing).bridge) as runtime:
        await runtime.call("initialize", INIT)
        health = (await runtime.call("provider/health", probe))["health"]
        assert health["status"] == "unknown" and health["statusMessage"].startswith("pi could not be started: ")
        error = await runtime.error("thread/start", start(tmp_path))
        assert error.code == rpc.BRIDGE_ERROR and error.message.startswith("pi could not be started: ")

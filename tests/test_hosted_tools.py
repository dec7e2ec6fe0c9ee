"""The real tool host behind a real daemon (issue 35): `bbridge.toml`'s tools and bundles loaded by `load_host`, called
by the fake bridge's `tool` mode (tests/test_hosting_daemon.py has the daemon's side with an in-process fake host).

An `ask` answered `allow_for_session` by a second client is not asked again for that tool; `deny` is a failed result
the model reads; a tool still running at `thread/stop` is killed with its children; a broken bundle is refused and
listed in `daemon/status` while the others serve.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import trio

from bbridge.toolhost.host import load_host
from bbridge.wire import rpc
from bbridge.wire.interactions import approval_answer
from tests.support import connect, fake_provider, running
from tests.test_child_process import until_gone
from tests.test_declared_tools import call_turn, completed
from tests.test_hosting_daemon import THREAD, run_call, start, until

PY = json.dumps(sys.executable)
# Writes its pid and a sleeping child's to `pids` in its working directory, then sleeps.
SLEEPER = (
    "import subprocess, os, time; c = subprocess.Popen(['sleep', '300']); "
    "open('pids', 'w').write(f'{os.getpid()} {c.pid}'); time.sleep(300)"
)


def host_of(tmp_path: Path, tools_dir: Path | None = None) -> Any:
    config = tmp_path / "bbridge.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [tools.note]
            description = "Repeats its text"
            schema = {{ type = "object", properties = {{ text = {{ type = "string" }} }} }}
            command = [{PY}, "-c", "import sys; print(sys.argv[1])", "{{text}}"]

            [tools.forbidden]
            description = "Never runs"
            command = ["false"]
            policy = "deny"

            [tools.sleeper]
            description = "Sleeps, with a child"
            command = [{PY}, "-c", {json.dumps(SLEEPER)}]
            policy = "allow"
            env = ["PATH"]
            """
        )
    )
    return load_host(config, tools_dir, None)


def text_of(result: Any) -> str:
    return "".join(item["text"] for item in result["contentItems"])


async def test_allow_for_session_answered_by_a_second_client_skips_the_next_ask(tmp_path: Path) -> None:
    async def hang(request: rpc.Request) -> Any:
        await trio.sleep_forever()

    host = host_of(tmp_path)
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path):
        async with connect(path, answer=hang) as owner, connect(path) as second:
            await owner.request("thread/start", {**start(), "cwd": str(tmp_path)})
            await owner.request("turn/start", call_turn({"tool": "note", "arguments": {"text": "$(id)"}}, 1, THREAD))
            await second.wait_for(lambda: any(name == "interaction/opened" for name, _ in second.notes))
            [(_, opened)] = [note for note in second.notes if note[0] == "interaction/opened"]
            assert opened["params"]["hostedTool"]["argv"][-1] == "$(id)"  # the argv it would run, literally
            answer = approval_answer(opened["requestId"], opened["params"]["payload"], "allow_for_session")
            await second.request("interaction/respond", {"requestId": opened["requestId"], "result": answer})
            await owner.wait_for(lambda: completed(owner, THREAD))
            got = await run_call(owner, {"tool": "note", "arguments": {"text": "again"}}, 2)
            assert got["success"] and text_of(got).strip() == "again"
            assert [name for name, _ in second.notes].count("interaction/opened") == 1  # not asked again
            denied = await run_call(owner, {"tool": "forbidden", "arguments": {}}, 3)
            assert not denied["success"] and "denied by the tool's policy" in text_of(denied)
            assert daemon.counters.tool_calls_relayed == 0


async def test_thread_stop_kills_a_running_tool_and_its_children(tmp_path: Path) -> None:
    host = host_of(tmp_path)
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (_daemon, path):
        async with connect(path) as client:
            await client.request("thread/start", {**start(), "cwd": str(tmp_path)})
            await client.request("turn/start", call_turn({"tool": "sleeper", "arguments": {}}, 1, THREAD))
            pids_file = tmp_path / "pids"
            await until(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 2)
            pids = [int(pid) for pid in pids_file.read_text().split()]
            await client.request("thread/stop", {"threadId": THREAD, "intent": "interrupt"})
            await client.wait_for(lambda: completed(client, THREAD))
    for pid in pids:
        assert await until_gone(pid), f"process {pid} outlived the stop"


async def test_a_broken_bundle_is_refused_and_listed_while_the_others_serve(tmp_path: Path) -> None:
    tools_dir = tmp_path / "tools"
    for name, entry in (("good", "run.sh"), ("escape", "../x")):
        bundle = tools_dir / name
        bundle.mkdir(parents=True)
        script = bundle / "run.sh"
        script.write_text("#!/bin/sh\necho ok\n")
        script.chmod(0o755)
        manifest = {"name": name, "version": "1", "description": name, "entry": entry, "command": "{entry}"}
        (bundle / "plugin.json").write_text(json.dumps(manifest))
    host = host_of(tmp_path, tools_dir)
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (_daemon, path):
        async with connect(path) as client:
            status = await client.request("daemon/status", {})
            hosted = status["hostedTools"]
            assert "good" in [tool["name"] for tool in hosted["tools"]]
            assert "escape" not in [tool["name"] for tool in hosted["tools"]]
            assert any("escape" in refusal["section"] and "entry" in str(refusal) for refusal in hosted["refused"])

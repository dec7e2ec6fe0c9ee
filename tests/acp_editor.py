"""An editor driving `bbridge acp` with the ACP Python SDK's client (run under .cache/acp/venv's Python).

    python tests/acp_editor.py SCENARIO CWD [SESSION_ID] -- BBRIDGE ACP ARGV...

prints one JSON object: what each step answered and every `session/update` the agent sent. Scenarios: `main`
(initialize, new session, set provider and model, a prompt, a refused provider change, a cancelled prompt,
list, a list with a cursor the agent never gave), `steer` (a prompt while a held one runs), `all` (the echo bridge's
`deltas:all` turn: every event kind), `load` (load SESSION_ID, a
prompt, list), `approve` (a prompt whose approval the editor answers `allow_once`), `hold` (the same, but the editor
never answers: it prints `{"asked": SESSION_ID}` and another client answers; the report lists the agent's
`$/cancel_request`s; then it prints `{"prompted": SESSION_ID}` and waits for the echo of the other client's own
turn, "from the page").
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import acp
from acp.schema import ClientCapabilities, Implementation, McpServerStdio

STEP_S = 30.0  # every step's bound
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # tests/test_tracing.py's client trace


class Editor:
    def __init__(self, hold: bool) -> None:
        self.updates: list[dict[str, Any]] = []
        self.permissions: list[dict[str, Any]] = []
        self.hold = hold
        self.chunk = asyncio.Event()
        self.asked = asyncio.Event()
        self.cancel_requests: list[dict[str, Any]] = []  # the agent's `$/cancel_request`s
        self.asked_ids: list[Any] = []  # the ids of its `session/request_permission`s
        self.raw_updates = 0  # `session/update`s on the wire (the SDK drops one its schema refuses)

    def observe(self, event: Any) -> None:
        """Every message the agent sends, seen on the wire (the SDK routes no `$/` notification)."""
        message = event.message
        if event.direction.value != "incoming":
            return
        if message.get("method") == "$/cancel_request":
            self.cancel_requests.append(message.get("params") or {})
        elif message.get("method") == "session/update":
            self.raw_updates += 1
        elif message.get("method") == "session/request_permission":
            self.asked_ids.append(message.get("id"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        dumped = update.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.updates.append({"sessionId": session_id, **dumped})
        if dumped.get("sessionUpdate") == "agent_message_chunk":
            self.chunk.set()

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        self.permissions.append({"sessionId": session_id, "toolCall": tool_call.model_dump(by_alias=True,
            exclude_none=True, mode="json"), "options": [o.model_dump(by_alias=True, mode="json") for o in options]})  # fmt: skip
        self.asked.set()
        if self.hold:  # never answered: another client answers first
            await asyncio.sleep(STEP_S)
        return {"outcome": {"outcome": "selected", "optionId": options[0].option_id}}

    async def until(self, needle: str) -> None:
        """Until the agent's text (every `agent_message_chunk` so far) holds `needle`."""
        while needle not in "".join(u["content"].get("text", "") for u in self.updates
                                    if u["sessionUpdate"] == "agent_message_chunk"):  # fmt: skip
            await asyncio.sleep(0.05)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def servers() -> list[McpServerStdio]:
    """The editor's MCP servers: `ACP_EDITOR_MCP` (a JSON argv) as the stdio server `mini`, else none."""
    argv = json.loads(os.environ.get("ACP_EDITOR_MCP", "[]"))
    return [McpServerStdio(name="mini", command=argv[0], args=argv[1:], env=[])] if argv else []


async def main(scenario: str, cwd: str, session: str | None, argv: list[str]) -> dict[str, Any]:
    editor = Editor(hold=scenario == "hold")
    report: dict[str, Any] = {}
    spawned = acp.spawn_agent_process(lambda _agent: editor, argv[0], *argv[1:], observers=[editor.observe])
    async with spawned as (conn, _process):
        init = await asyncio.wait_for(conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="acp-editor-test", version="1")), STEP_S)  # fmt: skip
        report["initialize"] = init.model_dump(by_alias=True, exclude_none=True, mode="json")
        if scenario == "load":
            assert session is not None
            loaded = await asyncio.wait_for(conn.load_session(cwd=cwd, session_id=session), STEP_S)
            report["load"] = loaded.model_dump(by_alias=True, exclude_none=True, mode="json")
            again = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[acp.text_block("again")]), STEP_S)
            report["again"] = again.stop_reason
        else:
            new = await asyncio.wait_for(conn.new_session(cwd=cwd, mcp_servers=servers()), STEP_S)
            session = new.session_id
            report["new"] = new.model_dump(by_alias=True, exclude_none=True, mode="json")
        report["sessionId"] = session
        if scenario == "main":
            options = await conn.set_config_option(config_id="provider", session_id=session, value="echo")
            options = await conn.set_config_option(config_id="model", session_id=session, value="echo")
            report["options"] = options.model_dump(by_alias=True, exclude_none=True, mode="json")
            done = await asyncio.wait_for(
                conn.prompt(session_id=session, prompt=[acp.text_block("hello there")]), STEP_S
            )
            report["first"] = done.stop_reason
            try:
                await conn.set_config_option(
                    config_id="provider", session_id=session, value="echo2"
                )  # the test's config has it
            except acp.RequestError as refused:
                report["refused"] = str(refused)
            editor.chunk.clear()
            slow = asyncio.create_task(
                conn.prompt(session_id=session, prompt=[acp.text_block("slow:300 " + "word " * 40)])
            )
            await asyncio.wait_for(editor.chunk.wait(), STEP_S)
            await conn.cancel(session_id=session)
            report["cancelled"] = (await asyncio.wait_for(slow, STEP_S)).stop_reason
        elif scenario == "mcp":  # the session's own MCP server's tool, called by the agent behind it
            called = await asyncio.wait_for(
                conn.prompt(session_id=session, prompt=[acp.text_block('tool:mini__echo args:{"text":"hi"}')]), STEP_S
            )
            report["mcp"] = called.stop_reason
        elif scenario == "traced":  # W3C trace context in the prompt's `_meta` (ACP's meta propagation)
            traced = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[acp.text_block("traced")],
                traceparent=TRACEPARENT, tracestate="editor=1"), STEP_S)  # fmt: skip
            report["traced"] = traced.stop_reason
        elif scenario == "all":
            every = await asyncio.wait_for(
                conn.prompt(session_id=session, prompt=[acp.text_block("deltas:all")]), STEP_S
            )
            report["all"] = every.stop_reason
        elif scenario == "steer":
            held = asyncio.create_task(conn.prompt(session_id=session, prompt=[acp.text_block("hold first")]))
            await asyncio.wait_for(editor.chunk.wait(), STEP_S)
            steer = await asyncio.wait_for(conn.prompt(session_id=session, prompt=[acp.text_block("finish")]), STEP_S)
            report["steer"] = steer.stop_reason
            report["held"] = (await asyncio.wait_for(held, STEP_S)).stop_reason
        elif scenario in ("approve", "hold"):
            prompt = asyncio.create_task(conn.prompt(session_id=session, prompt=[acp.text_block("approve:command")]))
            await asyncio.wait_for(editor.asked.wait(), STEP_S)
            print(json.dumps({"asked": session}), flush=True)  # the test answers it elsewhere when holding
            report["prompt"] = (await asyncio.wait_for(prompt, STEP_S)).stop_reason
            if scenario == "hold":  # the other client now starts a turn of its own on the session's thread
                print(json.dumps({"prompted": session}), flush=True)
                await asyncio.wait_for(editor.until("echo: from the page"), STEP_S)
            else:
                await asyncio.sleep(0.2)
        listed = await asyncio.wait_for(conn.list_sessions(cwd=cwd), STEP_S)
        report["list"] = listed.model_dump(by_alias=True, exclude_none=True, mode="json")
        if scenario == "main":
            try:
                await asyncio.wait_for(conn.list_sessions(cwd=cwd, cursor="not one of its cursors"), STEP_S)
            except acp.RequestError as refused:
                report["badCursor"] = str(refused)
        report["updates"] = editor.updates
        report["permissions"] = editor.permissions
        report["cancelRequests"] = editor.cancel_requests
        report["askedIds"] = editor.asked_ids
        report["rawUpdates"] = editor.raw_updates
    return report


if __name__ == "__main__":
    split = sys.argv.index("--")
    head, argv = sys.argv[1:split], sys.argv[split + 1 :]
    result = asyncio.run(main(head[0], head[1], head[2] if len(head) > 2 else None, argv))
    print(json.dumps(result))

"""OpenTelemetry traces (issue 49, item 3), checked against a real OTLP/HTTP receiver (`tests/otlp.py`: it decodes
`/v1/traces` with the official protobuf definitions): a turn with its hosted tool call under it, the client's trace
id kept from `turn/start`'s `_meta`, `TRACEPARENT` seen by the hosted tool's process, an MCP call's `_meta`, waits on
a person, a client's tool, a bridge's start, a Perspectives run with its members' turns under it; and, without
`[telemetry]`, nothing exported and nothing of OpenTelemetry imported (in a fresh interpreter).

The daemons run the echo bridge (`tool:NAME` calls a tool, `approve:KIND` asks a person) in process, with the tracer
`serve` builds from the file; closing the tracer exports every span before the receiver is read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.cli import main
from bbridge.daemon import server
from bbridge.daemon.config import ProviderConfig, echo_provider
from bbridge.daemon.runtime import Daemon
from bbridge.perspectives.room import Perspectives
from bbridge.perspectives.settings import load_perspectives
from bbridge.seams.telemetry import NO_SPAN, NO_TRACER
from bbridge.seams.tool_host import Approval, HostedCall
from bbridge.serving import room_face
from bbridge.telemetry import tracer as build_tracer
from bbridge.telemetry.otel import OtelTracer
from bbridge.telemetry.settings import TelemetryConfig, load_telemetry, telemetry_from
from bbridge.telemetry.turns import Turns
from bbridge.toolhost.host import load_host
from bbridge.toolhost.mcp import McpServerConfig, mcp_servers
from bbridge.wire import rpc
from bbridge.wire.lanes import read_lane
from tests.otlp import ReceivedSpan, Receiver, otlp_receiver
from tests.support import FULL, REPO, TestClient, connect, running
from tests.test_declared_tools import completed
from tests.test_perspectives_runs import CALLER, call, delivered, table

THREAD = "thr_traced"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
# The command tool prints the trace context it was given (and proves the allowlist still holds: no PATH).
ENVDUMP = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('TRACEPARENT', 'TRACESTATE', 'PATH')}))"


def config_text(receiver: Receiver) -> str:
    return textwrap.dedent(
        f"""\
        [telemetry]
        otlp_endpoint = "{receiver.url}/"
        headers = {{ x-bbridge-test = "yes" }}
        service_name = "bbridge-under-test"

        [tools.envdump]
        description = "Prints the trace context it got"
        command = {json.dumps([sys.executable, "-c", ENVDUMP])}
        policy = "allow"
        """
    )


@asynccontextmanager
async def traced(
    tmp_path: Path, receiver: Receiver, answer: Any = None, declared: list[dict[str, Any]] | None = None
) -> AsyncIterator[tuple[Daemon, OtelTracer, TestClient]]:
    """An echo daemon with `[telemetry]` and `[tools.envdump]` read from a file as `serve` reads them, its tracer
    closed (every span exported) when the block ends."""
    config = tmp_path / "bbridge.toml"
    config.write_text(config_text(receiver), encoding="utf-8")
    settings, refused = load_telemetry(config)
    assert settings is not None and not refused, refused
    tracer = build_tracer(settings)
    assert isinstance(tracer, OtelTracer)
    host = load_host(config, None, None)
    try:
        options = {"tool_host": host, "tracer": tracer, "record_dir": tmp_path / "rec"}
        async with running(tmp_path, {"echo": echo_provider()}, **options) as (daemon, path):
            async with connect(path, answer) as client:
                start = {"providerId": "echo", "threadId": THREAD, "cwd": str(tmp_path), "options": FULL}
                await client.request("thread/start", {**start, **({"dynamicTools": declared} if declared else {})})
                yield daemon, tracer, client
    finally:
        host.close()
        tracer.close()


async def turn(client: TestClient, text: str, n: int, meta: dict[str, Any] | None = None) -> None:
    params: dict[str, Any] = {
        "threadId": THREAD,
        "input": [{"type": "text", "text": text}],
        "clientRequestId": f"creq_tracingab{'23456789ab'[n]}",
        "options": {**FULL, "model": "echo"},
    }
    if meta is not None:
        params["_meta"] = meta
    await client.request("turn/start", params)
    await client.wait_for(lambda: client.settled(THREAD, n))


def one(spans: list[ReceivedSpan]) -> ReceivedSpan:
    assert len(spans) == 1, spans
    return spans[0]


def sent_to_bridge(record: Path, method: str) -> list[dict[str, Any]]:
    lane = read_lane(record / "echo" / THREAD / "runtime→bridge.ndjson", "runtime→bridge")
    messages = [json.loads(entry.line) for entry in lane]
    return [message["params"] for message in messages if message.get("method") == method]


async def test_a_turn_and_its_hosted_tool_call_reach_a_real_otlp_receiver(tmp_path: Path) -> None:
    """The client's trace id is kept (the turn is the child of its `traceparent`), the tool call is the turn's
    child, and the tool's process got the tool call's span as `TRACEPARENT` beside its (empty) env allowlist."""
    with otlp_receiver() as receiver:
        async with traced(tmp_path, receiver) as (daemon, tracer, client):
            await turn(client, "tool:envdump", 1, {"traceparent": TRACEPARENT, "tracestate": "vendor=1", "other": 1})
            [turn_id] = [e["scope"]["turnId"] for e in client.of(THREAD, "turn/started")]
            [message] = [
                e["item"]["text"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "agentMessage"
            ]
            [usage] = [e["tokenUsage"]["last"] for e in client.of(THREAD, "thread/tokenUsage/updated")]
        spans = receiver.spans  # the tracer closed: every span was exported
        started = one(receiver.named("bbridge.bridge.start"))
        traced_turn = one(receiver.named("bbridge.turn"))
        tool_call = one(receiver.named("bbridge.tool_call"))
        requests = list(receiver.requests)
    assert {span.name for span in spans} == {"bbridge.bridge.start", "bbridge.turn", "bbridge.tool_call"}
    assert started.attributes["bbridge.provider_id"] == "echo" and started.parent_span_id == ""
    assert isinstance(started.attributes["process.pid"], int) and started.status != 2
    # the turn: the client's trace, its span the parent; the GenAI conventions' names
    assert (traced_turn.trace_id, traced_turn.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    attributes = traced_turn.attributes
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.provider.name"] == "echo" and attributes["gen_ai.request.model"] == "echo"
    assert attributes["gen_ai.conversation.id"] == THREAD == attributes["bbridge.thread_id"]
    assert attributes["bbridge.turn_id"] == turn_id and attributes["bbridge.turn.status"] == "completed"
    assert attributes["gen_ai.usage.input_tokens"] == usage["inputTokens"] > 0  # the turn's usage as it was reported
    assert attributes["gen_ai.usage.output_tokens"] == usage["outputTokens"] > 0
    assert attributes["bbridge.usage.total_tokens"] == usage["totalTokens"]
    assert traced_turn.start_ns <= tool_call.start_ns <= tool_call.end_ns <= traced_turn.end_ns
    # the tool call under the turn, with its decision, who made it and how it ran
    assert (tool_call.trace_id, tool_call.parent_span_id) == (CLIENT_TRACE, traced_turn.span_id)
    assert tool_call.attributes["gen_ai.tool.name"] == "envdump"
    assert tool_call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_call.attributes["bbridge.tool.kind"] == "hosted"
    assert tool_call.attributes["bbridge.tool.decision"] == "allow"
    assert tool_call.attributes["bbridge.tool.decided_by"].startswith("the tool's policy (")
    assert tool_call.attributes["bbridge.tool.status"] == "ok" and tool_call.attributes["bbridge.tool.exit_status"] == 0
    assert tool_call.attributes["bbridge.tool.success"] is True and tool_call.status != 2
    # what the tool's process saw: the tool call's span, the client's trace state; nothing else leaked in
    seen = json.loads(message.split("→", 1)[1])
    assert seen == {"TRACEPARENT": f"00-{CLIENT_TRACE}-{tool_call.span_id}-01", "TRACESTATE": "vendor=1", "PATH": None}
    # the export itself: OTLP/HTTP protobuf to <otlp_endpoint>/v1/traces with the configured headers and service
    assert all(r["path"] == "/v1/traces" and r["content-type"] == "application/x-protobuf" for r in requests)
    assert all(r["x-bbridge-test"] == "yes" for r in requests)
    assert traced_turn.resource["service.name"] == "bbridge-under-test"
    # `_meta` is the daemon's: the bridge never got it
    [sent] = sent_to_bridge(tmp_path / "rec", "turn/start")
    assert "_meta" not in sent and sent["input"][0]["text"] == "tool:envdump"


async def test_a_root_turn_a_wait_on_a_person_a_client_tool_and_a_failed_turn(tmp_path: Path) -> None:
    """A turn/start without `_meta` starts a trace of its own; an approval is a `bbridge.interaction` under its turn
    (who answered, what); a client's tool call a `bbridge.tool_call` of kind `client`; a failed turn's span is an
    error with the turn's message; a malformed `traceparent` starts a trace of its own."""

    async def answer(request: rpc.Request) -> Any:
        if request.method == "interaction/request":
            await trio.sleep(0.05)  # a person takes a moment
            return {"decision": "allow_once"}
        return {"success": True, "contentItems": [{"type": "inputText", "text": "from the client"}]}

    declared = {"name": "ask_client", "description": "The client's own", "inputSchema": {"type": "object"}}
    with otlp_receiver() as receiver:
        async with traced(tmp_path, receiver, answer, [declared]) as (daemon, tracer, client):
            bad = {"threadId": THREAD, "input": [], "clientRequestId": "creq_tracingabz", "_meta": {"traceparent": 5}}
            with pytest.raises(rpc.RpcError, match=r"\$\._meta\.traceparent"):  # a wrong type is the client's error
                await client.request("turn/start", bad)
            await turn(client, "approve:command", 1)
            await turn(client, "tool:ask_client", 2, {"traceparent": "00-not-a-trace-01"})
            await turn(client, "fail:it_broke", 3)
        turns = receiver.named("bbridge.turn")
        waited = one(receiver.named("bbridge.interaction"))
        tool_call = one(receiver.named("bbridge.tool_call"))
    approved, called, failed = sorted(turns, key=lambda span: span.start_ns)
    assert approved.parent_span_id == "" and len({span.trace_id for span in turns}) == 3
    assert called.parent_span_id == ""  # the malformed traceparent was not taken
    assert (waited.trace_id, waited.parent_span_id) == (approved.trace_id, approved.span_id)
    assert waited.attributes["bbridge.interaction.kind"] == "approval"
    assert waited.attributes["bbridge.interaction.decision"] == "allow_once"
    assert waited.attributes["bbridge.interaction.resolved_by"].startswith("socket")
    assert waited.end_ns - waited.start_ns >= 50_000_000
    assert (tool_call.trace_id, tool_call.parent_span_id) == (called.trace_id, called.span_id)
    assert tool_call.attributes["bbridge.tool.kind"] == "client"
    assert tool_call.attributes["bbridge.tool.decision"] == "relayed"
    assert tool_call.attributes["bbridge.tool.decided_by"].startswith("socket")
    assert failed.status == 2 and failed.attributes["bbridge.turn.status"] == "failed"
    assert "it broke" in failed.message


async def test_a_steer_is_a_span_under_the_turn_it_steers_and_a_refused_one_fails(tmp_path: Path) -> None:
    def text(words: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": words}]

    with otlp_receiver() as receiver:
        async with traced(tmp_path, receiver) as (daemon, tracer, client):
            start = {
                "threadId": THREAD,
                "input": text("hold on"),
                "clientRequestId": "creq_tracingab2",
                "options": FULL,
            }
            await client.request("turn/start", start)
            await client.wait_for(lambda: bool(client.of(THREAD, "turn/started")))
            turn_id = client.of(THREAD, "turn/started")[0]["scope"]["turnId"]
            steer = {"threadId": THREAD, "input": text("finish"), "expectedTurnId": turn_id, "options": FULL}
            await client.request("turn/steer", {**steer, "clientRequestId": "creq_tracingab3"})
            await client.wait_for(lambda: client.settled(THREAD, 1))
            with pytest.raises(rpc.RpcError) as refused:  # the turn has ended
                await client.request("turn/steer", {**steer, "clientRequestId": "creq_tracingab4"})
        steered = one(receiver.named("bbridge.turn"))
        accepted, failed = sorted(receiver.named("bbridge.turn.steer"), key=lambda span: span.start_ns)
    assert (accepted.trace_id, accepted.parent_span_id) == (steered.trace_id, steered.span_id)
    assert steered.start_ns <= accepted.start_ns <= accepted.end_ns <= steered.end_ns
    assert accepted.attributes["bbridge.thread_id"] == THREAD and accepted.status != 2
    assert failed.status == 2 and failed.message == refused.value.message


async def test_an_mcp_tool_call_carries_its_span_in_the_requests_meta(tmp_path: Path) -> None:
    """Through the tool host: an MCP server's tool call is noted `mcp` on its span, and the server gets the span's
    trace context in `tools/call`'s `_meta` (`traceparent`, `tracestate`: the MCP trace-context keys)."""
    command = [sys.executable, str(REPO / "tests" / "mcp_server.py")]
    server = McpServerConfig(name="tiny", source="test", command=command, policy="allow")
    host = load_host(None, None, None)
    with otlp_receiver() as receiver:
        tracer = OtelTracer(TelemetryConfig(receiver.url))
        try:
            async with mcp_servers([server]) as served:
                host.extend(served.tools)
                span = tracer.start("bbridge.tool_call", {"traceparent": TRACEPARENT, "tracestate": "v=2"}, {})
                result = await host.call(hosted_call("tiny__meta", span))
                span.end()
                untraced = await host.call(hosted_call("tiny__meta", NO_SPAN))
        finally:
            host.close()
            tracer.close()
        exported = one(receiver.named("bbridge.tool_call"))
    meta = json.loads(result["contentItems"][0]["text"])
    assert meta == {"traceparent": f"00-{CLIENT_TRACE}-{exported.span_id}-01", "tracestate": "v=2"}
    assert exported.parent_span_id == CLIENT_SPAN
    assert exported.attributes["bbridge.tool.kind"] == "mcp" and exported.attributes["bbridge.tool.status"] == "ok"
    assert exported.attributes["bbridge.tool.decision"] == "allow"
    assert json.loads(untraced["contentItems"][0]["text"]) == {}


def hosted_call(tool: str, span: Any) -> HostedCall:
    async def ask(details: dict[str, Any]) -> Approval:
        return Approval("deny", "test")

    return HostedCall("thr-1", "echo", None, "call-1", tool, {}, None, ask, span=span)


async def test_a_perspectives_run_is_a_span_with_its_members_turns_under_it(tmp_path: Path) -> None:
    """`help`: the caller's tool call, the run under it, the planner's and the expert's turns under the run (the room
    passes its trace context on their turn/starts). `gather_perspectives`, detached: its run outlives the tool call
    that launched it, the planner's, each worker's and the synthesis's turns under it, and so is the turn its one
    delivery starts on the calling thread."""
    with otlp_receiver() as receiver:
        config = tmp_path / "bbridge.toml"
        config.write_text(table() + f'\n[telemetry]\notlp_endpoint = "{receiver.url}"\n', encoding="utf-8")
        settings, _ = load_perspectives(config)
        telemetry, _ = load_telemetry(config)
        assert settings is not None and telemetry is not None
        tracer = build_tracer(telemetry)
        room = Perspectives(settings, tracer)
        host = load_host(None, None, None, external=room.tools)
        fake = [sys.executable, str(REPO / "tests" / "fakes" / "fake_bridge.py")]
        providers = {
            "caller": ProviderConfig(command=[*fake, "tool"]),
            "panel": ProviderConfig(command=[*fake, "panel"]),
        }
        daemon = Daemon(providers, text_delta_flush_ms=0, tool_host=host, services=[room], tracer=tracer)
        sock = tmp_path / "bbridge.sock"
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(server.serve, daemon, [server.socket_face(sock), room_face(room)])
                async with connect(sock) as client:
                    start = {"providerId": "caller", "threadId": CALLER, "cwd": str(tmp_path), "options": FULL}
                    await client.request("thread/start", start)
                    answered = await call(client, "help", {"question": "Why is it slow?"})
                    await call(client, "gather_perspectives", {"question": "Where?", "lenses": ["alpha", "beta"]}, 2)
                    (message,) = await delivered(client, room)
                    await client.wait_for(lambda: completed(client, CALLER, 3), timeout=30)
                daemon.request_shutdown()
        finally:
            host.close()
            tracer.close()
        run, panel = sorted(receiver.named("bbridge.perspectives.run"), key=lambda span: span.start_ns)
        turns = receiver.named("bbridge.turn")
        help_call, gather_call = sorted(receiver.named("bbridge.tool_call"), key=lambda span: span.start_ns)
    assert answered["success"] is True and message.startswith("Perspectives panel result")
    first, second, delivery = sorted(
        (span for span in turns if span.attributes["bbridge.thread_id"] == CALLER), key=lambda span: span.start_ns
    )
    # help: under the caller's first turn's tool call
    assert (help_call.parent_span_id, help_call.attributes["gen_ai.tool.name"]) == (first.span_id, "help")
    assert (run.trace_id, run.parent_span_id) == (first.trace_id, help_call.span_id)
    assert run.attributes["bbridge.perspectives.tool"] == "help"
    assert run.attributes["bbridge.perspectives.outcome"] == "delivered" and run.status != 2
    members = [span for span in turns if span.parent_span_id == run.span_id]
    assert len(members) == 2  # the planner's turn and the expert's
    assert all(span.trace_id == run.trace_id and span.attributes["gen_ai.provider.name"] == "panel" for span in members)
    # gather_perspectives: the run under its tool call, ending after it; the members and the delivery under the run
    assert (gather_call.parent_span_id, panel.parent_span_id) == (second.span_id, gather_call.span_id)
    assert panel.end_ns > gather_call.end_ns and panel.attributes["bbridge.perspectives.lenses"] == 2
    assert panel.attributes["bbridge.perspectives.outcome"] == "delivered"
    under = [span for span in turns if span.parent_span_id == panel.span_id]
    assert len(under) == 1 + 2 + 1 + 1  # the planner, two workers, the synthesis, and the delivery's turn
    assert delivery in under and all(span.trace_id == second.trace_id for span in under)


# -- without [telemetry] ---------------------------------------------------------------------------------------------

UNTRACED = """
import json, os, sys
from pathlib import Path

import trio

from bbridge.daemon.config import echo_provider
from bbridge.daemon.runtime import Daemon
from bbridge.serving import _served
from tests.support import FULL, connect, running


async def main(root: Path, args) -> None:
    served = _served(args, client_servers=False)
    assert served.tracer.enabled is False
    options = {**served.daemon_options(), "text_delta_flush_ms": 0}
    async with running(root, {**served.providers, "echo": echo_provider()}, **options) as (daemon, path):
        async with connect(path) as client:
            start = {"providerId": "echo", "threadId": "thr_plain", "cwd": str(root), "options": FULL}
            await client.request("thread/start", start)
            turn = {"threadId": "thr_plain", "input": [{"type": "text", "text": "tool:envdump"}],
                    "clientRequestId": "creq_untraced22", "options": FULL, "_meta": {"traceparent": sys.argv[2]}}
            await client.request("turn/start", turn)
            await client.wait_for(lambda: client.settled("thr_plain"))
            print("TEXT", json.dumps(client.text("thr_plain")))
    if served.tool_host is not None:
        served.tool_host.close()
    served.tracer.close()


class Args:
    config = Path(sys.argv[1])
    tools_dir = None
    journal = None


trio.run(main, Path(sys.argv[1]).parent, Args)
print("MODULES", json.dumps(sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")))
"""


def test_without_telemetry_nothing_is_exported_and_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    """A fresh interpreter runs `serve`'s daemon from a file without `[telemetry]` (a hosted tool called, a client
    trace context sent) while every OTEL_* variable points at a receiver: nothing reaches it, no module of
    OpenTelemetry is loaded, and the tool gets no TRACEPARENT."""
    with otlp_receiver() as receiver:
        config = tmp_path / "bbridge.toml"
        config.write_text(config_text(receiver).split("[tools.envdump]", 1)[1].join(["[tools.envdump]", ""]))
        assert "[telemetry]" not in config.read_text()
        env = {
            **__import__("os").environ,
            "PYTHONPATH": str(REPO),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_SERVICE_NAME": "should-not-appear",
        }
        done = subprocess.run(
            [sys.executable, "-c", UNTRACED, str(config), TRACEPARENT],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("TEXT ", "MODULES ")))
        assert receiver.requests == [] and receiver.spans == []
    assert json.loads(said["MODULES"]) == []
    seen = json.loads(json.loads(said["TEXT"]).split("→", 1)[1])
    assert seen == {"TRACEPARENT": None, "TRACESTATE": None, "PATH": None}


# -- the pieces ------------------------------------------------------------------------------------------------------


def test_the_table_is_read_with_defaults_and_refused_whole_with_every_reason() -> None:
    config, refused = telemetry_from({"telemetry": {"otlp_endpoint": "https://collector.example:4318/base/"}})
    assert refused == () and config == TelemetryConfig("https://collector.example:4318/base")
    assert config.traces_url == "https://collector.example:4318/base/v1/traces"
    assert (config.service_name, config.sample_ratio, dict(config.headers)) == ("bbridge", 1.0, {})
    assert telemetry_from({}) == (None, ())
    bad = {
        "otlp_endpoint": "http://collector:4318/v1/traces",
        "headers": {"bad name": "x"},
        "sample_ratio": 1.5,
        "service_name": "",
        "exporter": "grpc",
    }
    config, refused = telemetry_from({"telemetry": bad})
    assert config is None
    reasons = [refusal.line() for refusal in refused]
    assert len(reasons) == 5 and all(line.startswith("telemetry: ") for line in reasons)
    joined = "\n".join(reasons)
    for expected in ("leave /v1/traces out", "'bad name' is not an HTTP header name", "from 0 to 1, got 1.5",
                     "non-empty string", "unknown key (known: otlp_endpoint, headers, service_name, sample_ratio)"):  # fmt: skip
        assert expected in joined
    assert "required" in telemetry_from({"telemetry": {"sample_ratio": 0.5}})[1][0].line()
    assert "http:// or https://" in telemetry_from({"telemetry": {"otlp_endpoint": "collector:4318"}})[1][0].line()
    assert "ratio" not in telemetry_from({"telemetry": {"otlp_endpoint": "http://h", "sample_ratio": 0}})[1]


def test_config_check_reads_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bbridge.toml"
    config.write_text('[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\nsample_ratio = 0.25\n')
    assert main(["config", "check", "--config", str(config)]) == 0
    assert "traces to http://127.0.0.1:4318/v1/traces" in capsys.readouterr().out
    config.write_text('[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\nsample_ratio = "all"\n')
    assert main(["config", "check", "--config", str(config)]) == 1
    assert "refused telemetry: sample_ratio: expected a number from 0 to 1, got 'all'" in capsys.readouterr().out


def test_turns_are_bounded_and_end_unfinished_at_close() -> None:
    """The turn bookkeeping keeps what it must and no more: a turn never started is forgotten behind newer ones,
    the oldest open turn ends untracked past the bound, and `close` ends the rest."""
    ended: list[tuple[str, dict[str, Any], str | None]] = []

    class Recorded:
        def __init__(self, name: str, attributes: dict[str, Any]) -> None:
            self.name, self.attributes = name, dict(attributes)

        def set(self, key: str, value: Any) -> None:
            self.attributes[key] = value

        def carrier(self) -> dict[str, str]:
            return {}

        def end(self, error: str | None = None) -> None:
            ended.append((self.name, self.attributes, error))

    import bbridge.telemetry.turns as turns_module

    turns = Turns(lambda name, parent, attributes: Recorded(name, dict(attributes)))
    bound = turns_module.MAX_KEPT
    turns_module.MAX_KEPT = 2
    try:
        for n in range(3):
            turns.requested(f"t{n}", "echo", None, None)
        assert turns.parent("t0", None) is None and turns.parent("t2", None) == None  # noqa: E711
        events = [(f"t{n}", {"type": "turn/started", "scope": {"kind": "turn", "turnId": f"u{n}"}}) for n in range(3)]
        turns.noticed("echo", events)
        assert [(name, attrs["bbridge.turn_id"], attrs["bbridge.turn.status"]) for name, attrs, _ in ended] == [
            ("bbridge.turn", "u0", "untracked")
        ]
        assert isinstance(turns.parent("t2", "nope"), Recorded)  # the thread's latest open turn
        turns.close()
    finally:
        turns_module.MAX_KEPT = bound
    assert [attrs["bbridge.turn.status"] for _, attrs, _ in ended] == ["untracked", "unfinished", "unfinished"]
    assert NO_TRACER.enabled is False and NO_SPAN.carrier() == {}

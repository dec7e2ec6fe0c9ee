"""Running one call of a command tool, safely (issue 35, "Run safely").

The argv is the tool's template filled from the arguments (`HostedTool.argv`: an argument is always one argv
element, and no shell ever reads it). The process leads its own session and process group, runs in the thread's
working directory with only the variables the tool names (`env`), beside the call's W3C trace context when it is
traced (`TRACEPARENT`, `TRACESTATE`: a tool that traces its own work joins the call's trace), and stdin on /dev/null. stdout is read to its
end but only its first `max_output_bytes` are kept (the rest is counted, and the result says where it was cut);
stderr keeps a bounded tail. When the leader exits, whatever it left in its group is killed (so a background
child cannot hold the pipes open); past `timeout_s` the group gets SIGTERM, then SIGKILL after `GRACE_S`. However
the call ends (answered, timed out, or cancelled by the daemon at thread/stop, release or a bridge's exit), the
group is killed and the leader reaped under a shield before `run` returns or raises: no process outlives it,
save one that left the group on purpose (setsid).

`retry` repeats a failed (`on_error`: non-zero exit, timeout, `isError`) or empty (`on_empty`) attempt, at most
`max_attempts` in all; attempt k (k >= 2) uses the (k-1)th value of each `param_fallbacks` list instead of the
argument, while a list lasts. A program that cannot be started is not retried.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import trio

from bbridge.seams.telemetry import TRACE_KEYS
from bbridge.toolhost.declarations import HostedTool
from bbridge.toolhost.results import ToolCallResult, failure, from_mcp, is_empty, text_result
from bbridge.wire import process

GRACE_S = 2.0  # a timed-out group's SIGTERM to SIGKILL
TAIL_BYTES = 4000  # the stderr tail an error result carries

Status = Literal["ok", "error", "timeout", "unstartable", "refused"]


@dataclass(frozen=True)
class Run:
    """What a call came to: the result for the model, and what the audit records of it."""

    result: ToolCallResult
    status: Status
    exit_status: int | None  # the last attempt's (negative: killed by that signal); None when none ran
    attempts: int
    bytes_out: int  # stdout bytes written, every attempt, including any past the cap


async def run(
    tool: HostedTool,
    arguments: Mapping[str, Any],
    cwd: str | None,
    environ: Mapping[str, str],
    trace: Mapping[str, str] | None = None,
) -> Run:
    """Run `tool` with `arguments` in `cwd` under its retry policy; `environ` is where `env`'s variables come from,
    `trace` the call's trace context (`{traceparent, tracestate?}`), given as `TRACEPARENT` and `TRACESTATE`."""
    if cwd is None or not os.path.isdir(cwd):
        problem = (
            "the thread has no working directory (give thread/start a cwd), so no tool can run in it"
            if cwd is None
            else f"the thread's working directory {cwd!r} is not a directory (removed?), so nothing was run"
        )
        return Run(failure(f"{tool.name}: {problem}"), "refused", None, 0, 0)
    env = {name: environ[name] for name in tool.env if name in environ}
    env |= {key.upper(): value for key, value in (trace or {}).items() if key in TRACE_KEYS}
    tries = _values(tool, arguments)
    attempt = await _once(tool, tool.argv(next(tries)), cwd, env)
    attempts, bytes_out = 1, attempt.bytes_out
    for values in tries:
        if not _retry(tool, attempt):
            break
        attempt = await _once(tool, tool.argv(values), cwd, env)
        attempts, bytes_out = attempts + 1, bytes_out + attempt.bytes_out
    return Run(attempt.result, attempt.status, attempt.exit_status, attempts, bytes_out)


def _values(tool: HostedTool, arguments: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Each attempt's arguments: as given, then with each `param_fallbacks` value in turn."""
    yield arguments
    for k in range(tool.retry.max_attempts - 1):
        fallbacks = {key: values[k] for key, values in tool.retry.param_fallbacks.items() if k < len(values)}
        yield {**arguments, **fallbacks}


def _retry(tool: HostedTool, attempt: _Attempt) -> bool:
    if attempt.status in ("error", "timeout"):
        return tool.retry.on_error
    return attempt.status == "ok" and tool.retry.on_empty and is_empty(attempt.result)


@dataclass(frozen=True)
class _Attempt:
    result: ToolCallResult
    status: Status
    exit_status: int | None
    bytes_out: int


class _Capped:
    """A stream read to its end, of which the first `limit` bytes are kept and the rest only counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        try:
            while chunk := await stream.receive_some():
                self.total += len(chunk)
                room = self.limit - len(self.data)
                if room > 0:
                    self.data += chunk[:room]
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def _once(tool: HostedTool, argv: list[str], cwd: str, env: dict[str, str]) -> _Attempt:
    try:
        proc = await process.spawn(argv, env=env, cwd=cwd, stdin=False)
    except OSError as exc:
        why = exc.strerror or str(exc)
        return _Attempt(
            failure(f"{tool.name}: cannot start {argv[0]!r}: {why} (check the tool's command and its env PATH)"),
            "unstartable",
            None,
            0,
        )
    out, err = _Capped(tool.max_output_bytes), process.StderrTail(max_bytes=TAIL_BYTES)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        with trio.move_on_after(tool.timeout_s) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(out.pump, proc.stdout)
                nursery.start_soon(err.pump, proc.stderr)
                await proc.wait()
                process.send_signal(proc.pid, signal.SIGKILL, group=True)  # what it left behind: the pipes close
        timed_out = deadline.cancelled_caught  # the leader may be gone while what it left holds the pipes
        if timed_out:
            await process.stop(proc, process.StopPlan(grace_s=GRACE_S, term_group=True))
    finally:
        with trio.CancelScope(shield=True):
            process.send_signal(proc.pid, signal.SIGKILL, group=True)
            await proc.wait()
            await proc.stdout.aclose()
            await proc.stderr.aclose()
    if timed_out:
        message = f"{tool.name}: timed out after {tool.timeout_s:g} s; its processes were stopped"
        return _Attempt(failure(_with_tail(message, err.text)), "timeout", proc.returncode, out.total)
    assert proc.returncode is not None  # reaped above
    return _Attempt(*_answer(tool, proc.returncode, out, err.text), proc.returncode, out.total)


def _answer(tool: HostedTool, returncode: int, out: _Capped, stderr: str) -> tuple[ToolCallResult, Status]:
    text = out.data.decode("utf-8", errors="replace")
    if out.total > out.limit:
        text += f"\n[output cut: the first {out.limit} of {out.total} bytes]"
    if returncode != 0:
        how = f"was killed by {_signal_name(-returncode)}" if returncode < 0 else f"exited with status {returncode}"
        message = _with_tail(f"{tool.name} {how}", stderr)
        return failure(f"{message}\nstdout:\n{text}" if text.strip() else message), "error"
    if out.total <= out.limit and text.lstrip().startswith("{"):
        try:
            result = from_mcp(msgspec.json.decode(out.data))
        except msgspec.DecodeError:
            result = None
        if result is not None:
            return result, "ok" if result["success"] else "error"
    return text_result(text), "ok"


def _with_tail(message: str, stderr: str) -> str:
    return f"{message}\nstderr (last lines):\n{stderr}" if stderr.strip() else message


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"

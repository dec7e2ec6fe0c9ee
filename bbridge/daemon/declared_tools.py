"""Client-declared tools and the checks a bridge's `item/tool/call` passes before it is relayed (issue 13).

A client declares tools as `dynamicTools` on `thread/start` / `thread/resume` / `thread/fork` (protocol.md
§3.2, §3.3.5). `Declarations.declare` checks a construction's declarations before anything reaches the bridge
(each `inputSchema` must be a valid Draft 2020-12 schema, checked once per distinct schema); the thread's
record keeps them once the construction succeeds (`daemon/threads.py`), the latest successful construction
winning, and `lookup` finds a call's tool there. A call's
arguments are then checked against the declared schema by a `Checker` before the client sees the call.

Bounding the cost, so that big or hostile schemas and arguments never stall other threads:

* a construction declares at most `MAX_TOOLS` tools, each `inputSchema` at most `MAX_SCHEMA_BYTES` of
  canonical JSON (else `-32602`); `check_schema` runs once per distinct schema, in a worker thread (pure
  Python: it gives the GIL back between bytecodes, so the event loop goes on; ~0.1 s for 64 KiB);
* arguments over `MAX_ARGUMENT_BYTES` (encoded) are refused without being validated;
* validation never runs in the daemon's process: Python's `re` (jsonschema's `pattern`) holds the GIL for a
  whole match, so a catastrophic pattern would freeze the event loop even from a worker thread. Each check
  runs in a checker process (`daemon/toolcheck.py`) under a deadline (`CHECK_DEADLINE_S`); a checker that
  misses it is killed (SIGKILL) and the call refused, so the CPU it burnt is the whole cost. At most
  `MAX_CHECKERS` checker processes exist at once (a `trio.CapacityLimiter`); a call waiting for a free one
  waits at most for the running checks' deadlines, and traffic that is not a tool call never waits at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import msgspec
import structlog
import trio

from bbridge.daemon.toolcheck import pointer
from bbridge.wire import protocol

log = structlog.get_logger("bbridge.daemon.declared_tools")

MAX_TOOLS = 256  # per construction
MAX_SCHEMA_BYTES = 64 * 1024  # one tool's inputSchema, canonical JSON
MAX_ARGUMENT_BYTES = 256 * 1024  # one call's arguments, JSON
CHECK_DEADLINE_S = 2.0  # one call's validation, in the checker process
MAX_CHECKERS = 2  # checker processes alive at once
MAX_CHECKED_SCHEMAS = 1024  # schema texts remembered as valid (re-checked when forgotten)
# Claude Code's name for a bb tool (claude-code-bridge.md §2.6); its bridge sends the bare name, codex's the declared one
MCP_PREFIX = "mcp__bb-bridge__"
_MAX_NAMES_LISTED = 20


class DeclarationError(ValueError):
    """A construction's `dynamicTools` the daemon refuses (`-32602`)."""


@dataclass(frozen=True)
class Tool:
    name: str
    schema: str  # canonical JSON text: the key of its compiled validator


@dataclass
class Refusal:
    """A call answered to the bridge as failed without reaching the client."""

    message: str

    def result(self) -> dict[str, Any]:
        return failed_result(self.message)


def failed_result(message: str) -> dict[str, Any]:
    """The `ToolCallResult` of a call that failed (protocol.md §3.6.1)."""
    return {"success": False, "contentItems": [{"type": "inputText", "text": message}]}


def canonical(schema: Any) -> str:
    """The schema's canonical JSON text (sorted keys, no spaces): equal schemas share one validator."""
    return msgspec.json.encode(schema, order="sorted").decode()


class Declarations:
    """Checks a construction's `dynamicTools`, remembering the schema texts already found valid."""

    def __init__(self) -> None:
        self._checked: dict[str, None] = {}  # insertion-ordered set of valid schema texts

    async def declare(self, raw: Any) -> dict[str, Tool]:
        """A construction's `dynamicTools` as tools by name; `DeclarationError` names what is wrong."""
        if raw is None:
            return {}
        try:
            declared = msgspec.convert(raw, list[protocol.DynamicTool])
        except msgspec.ValidationError as exc:
            raise DeclarationError(f"Invalid dynamicTools: {exc}") from None
        if len(declared) > MAX_TOOLS:
            raise DeclarationError(f"Too many dynamicTools: {len(declared)} (limit {MAX_TOOLS})")
        tools: dict[str, Tool] = {}
        for entry in declared:
            name = entry.name
            if name in tools:
                raise DeclarationError(f'Tool "{name}" is declared twice')
            text = canonical(entry.inputSchema)
            if len(text.encode()) > MAX_SCHEMA_BYTES:
                raise DeclarationError(
                    f'Tool "{name}" has an inputSchema of {len(text.encode())} bytes (limit {MAX_SCHEMA_BYTES})'
                )
            await self._check_schema(name, text, entry.inputSchema)
            tools[name] = Tool(name, text)
        return tools

    async def _check_schema(self, name: str, text: str, schema: Any) -> None:
        """`check_schema` once per distinct schema text, in a worker thread: it is pure Python (it releases the
        GIL between bytecodes), so the event loop keeps serving while a 64 KiB schema is checked (~0.1 s)."""
        if text in self._checked:
            return
        try:
            await trio.to_thread.run_sync(jsonschema.Draft202012Validator.check_schema, schema)
        except jsonschema.exceptions.SchemaError as exc:
            where = pointer(exc.absolute_path)
            raise DeclarationError(
                f'Tool "{name}" has an invalid inputSchema (JSON Schema draft 2020-12) at {where}: {exc.message}'
            ) from None
        except RecursionError:
            raise DeclarationError(f'Tool "{name}" has an inputSchema nested too deeply to check') from None
        self._checked[text] = None
        if len(self._checked) > MAX_CHECKED_SCHEMAS:
            del self._checked[next(iter(self._checked))]


def lookup(tools: dict[str, Tool], name: str) -> Tool | Refusal:
    """The declared tool a call names (`mcp__bb-bridge__<name>` too), or the refusal of an undeclared one."""
    tool = tools.get(name)
    if tool is None and name.startswith(MCP_PREFIX):
        tool = tools.get(name[len(MCP_PREFIX) :])
    if tool is not None:
        return tool
    if not tools:
        return Refusal(f'Tool "{name}" is not declared for this thread (no tools are declared)')
    names = sorted(tools)
    listed = ", ".join(f'"{n}"' for n in names[:_MAX_NAMES_LISTED]) + (", …" if len(names) > _MAX_NAMES_LISTED else "")
    return Refusal(f'Tool "{name}" is not declared for this thread (declared: {listed})')


class _Process:
    """One checker process, its pipes, and what is left over of its stdout.

    Started with `subprocess.Popen` on the event loop's thread rather than `trio.lowlevel.open_process`, which
    forks in a trio worker thread: `PR_SET_PDEATHSIG` (`daemon/toolcheck.py`) fires when the *thread* that forked
    the checker exits, and trio's idle worker threads exit after 10 s, so a checker forked there died whenever the
    daemon idled that long between tool calls. Popen forks with vfork on Linux, so the loop stalls for well under
    a millisecond, once per checker.
    """

    def __init__(self) -> None:
        child_stdin, to_child = os.pipe()
        from_child, child_stdout = os.pipe()
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "bbridge.daemon.toolcheck", str(os.getpid())],
                stdin=child_stdin,
                stdout=child_stdout,
                start_new_session=True,  # a terminal's signals are the daemon's
            )
        except BaseException:
            os.close(to_child)
            os.close(from_child)
            raise
        finally:
            os.close(child_stdin)
            os.close(child_stdout)
        self.stdin: trio.abc.SendStream = trio.lowlevel.FdStream(to_child)
        self.stdout: trio.abc.ReceiveStream = trio.lowlevel.FdStream(from_child)
        self.buffer = bytearray()

    async def ask(self, request: bytes) -> bytes:
        await self.stdin.send_all(request)
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return line
            chunk = await self.stdout.receive_some(65536)
            if not chunk:
                raise EOFError("the checker process exited")
            self.buffer += chunk

    async def kill(self) -> None:
        with trio.CancelScope(shield=True):
            self.popen.kill()  # a no-op once it has been reaped
            await trio.to_thread.run_sync(self.popen.wait)  # SIGKILLed: returns at once
            await self.stdin.aclose()
            await self.stdout.aclose()


class _Answer(msgspec.Struct):
    ok: bool | None = None
    path: str = "(root)"
    reason: str = ""
    error: str | None = None


@dataclass
class Checker:
    """Checks a call's arguments against its tool's schema in checker processes, each check under a deadline."""

    deadline_s: float = CHECK_DEADLINE_S
    max_argument_bytes: int = MAX_ARGUMENT_BYTES
    processes: int = MAX_CHECKERS
    spawned: int = 0  # checker processes started (a test's view of "never validated")
    killed: int = 0  # checker processes killed at their deadline
    busy: int = 0  # checks running now
    _idle: list[_Process] = field(default_factory=list)
    _all: set[_Process] = field(default_factory=set)
    _limiter: trio.CapacityLimiter | None = None
    _closed: bool = False

    async def check(self, tool: Tool, arguments: Any) -> Refusal | None:
        """None when the arguments are valid; else the refusal naming the tool, the path and the reason."""
        encoded = msgspec.json.encode(arguments)
        if len(encoded) > self.max_argument_bytes:
            return Refusal(
                f'Tool "{tool.name}" arguments are too large: {len(encoded)} bytes (limit {self.max_argument_bytes})'
            )
        if tool.schema == "{}" or tool.schema == "true":  # the schemas every instance satisfies
            return None
        request = b'{"schema":' + msgspec.json.encode(tool.schema) + b',"arguments":' + encoded + b"}\n"
        if self._limiter is None:
            self._limiter = trio.CapacityLimiter(self.processes)
        async with self._limiter:
            line = await self._answer(tool, request)
        if isinstance(line, Refusal):
            return line
        answer = msgspec.json.decode(line, type=_Answer)
        if answer.error is not None or answer.ok is None:
            log.error("a tool-argument checker refused its request", tool=tool.name, error=answer.error)
            return Refusal(f'Tool "{tool.name}" arguments could not be checked (the checker failed)')
        if answer.ok:
            return None
        return Refusal(f'Tool "{tool.name}" arguments are invalid at {answer.path}: {answer.reason}')

    async def _answer(self, tool: Tool, request: bytes) -> bytes | Refusal:
        """The checker's answer line, or the refusal of a check that could not be made. An idle checker that
        has exited meanwhile (killed by someone, say) is replaced and the check made again, so its death costs
        the next call nothing; a checker started for this very check that fails refuses the call."""
        while True:
            reused = bool(self._idle)
            try:
                process = self._idle.pop() if reused else self._spawn()
            except OSError as exc:
                log.error("could not start a tool-argument checker process", tool=tool.name, error=str(exc))
                return Refusal(f'Tool "{tool.name}" arguments could not be checked (the checker failed)')
            line: bytes | None = None
            self.busy += 1
            try:
                with trio.move_on_after(self.deadline_s):
                    line = await process.ask(request)
            except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                await self._kill(process)
                if reused:
                    log.warning(
                        "an idle tool-argument checker process had exited; starting another",
                        tool=tool.name,
                        returncode=process.popen.returncode,
                    )
                    continue
                log.error("a tool-argument checker process failed", tool=tool.name, error=str(exc))
                return Refusal(f'Tool "{tool.name}" arguments could not be checked (the checker failed)')
            except BaseException:
                await self._kill(process)  # cancelled mid-check: its answer would be read by the next call
                raise
            finally:
                self.busy -= 1
            if line is None:
                self.killed += 1
                await self._kill(process)
                log.warning("killed a tool-argument check at its deadline", tool=tool.name, deadlineS=self.deadline_s)
                return Refusal(
                    f'Tool "{tool.name}" arguments could not be checked within {self.deadline_s:g} s; '
                    "simplify the arguments"
                )
            if self._closed:
                await self._kill(process)
            else:
                self._idle.append(process)
            return line

    @property
    def alive(self) -> int:
        """Checker processes started and not yet killed."""
        return len(self._all)

    async def _kill(self, process: _Process) -> None:
        self._all.discard(process)
        await process.kill()

    def _spawn(self) -> _Process:
        process = _Process()
        self.spawned += 1
        self._all.add(process)
        return process

    async def aclose(self) -> None:
        """Kill the idle checkers; a busy one is killed when its check returns."""
        self._closed = True
        idle, self._idle = self._idle, []
        for process in idle:
            await self._kill(process)

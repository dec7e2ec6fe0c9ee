"""Child processes, as both ends of the protocol run them (protocol.md §9.4): spawn, stderr tail, stop.

The daemon runs bridges and a bridge runs its provider's CLI the same way: the child leads its own session and
process group (a stop reaches whatever it spawned), gets exactly the environment the caller built, and writes its
diagnostics on stderr, of which a bounded tail is kept for error messages. Stopping is one escalation whose
timings each caller sets (`StopPlan`): wait for a voluntary exit (the caller closed the child's stdin), SIGTERM,
then SIGKILL the group after a grace, then signal whatever of the group outlived the leader.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import trio

from bbridge.wire import framing

TAIL_LINES = 40
TAIL_BYTES = 4000  # protocol.md §9.4's PROVIDER_STDERR_TAIL_MAX_BYTES
TAIL_LINE_BYTES = 64 * 1024


async def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None = None, stderr: bool = True, stdin: bool = True
) -> trio.Process:
    """Start `argv` with piped stdin (else /dev/null) and stdout (and stderr, else discarded) in its own session
    and process group; `OSError` when it cannot start."""
    return await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )


def send_signal(pid: int, sig: signal.Signals, *, group: bool) -> None:
    """Signal a process (its whole group when `group`); one that is already gone is not an error."""
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class StopPlan:
    """How one kind of child is stopped; every agent bridge and the daemon spell their sequence as one of these.

    `wait_s`: a voluntary exit awaited first (the caller has closed the child's stdin). Then, if the child still
    runs: SIGTERM (the leader, or the whole group with `term_group`), `grace_s` for it to exit, then SIGKILL the
    group and wait `kill_wait_s` (None: until it exits). Last, `leftovers` goes to the group: whatever the leader
    left behind (None: nothing is sent).
    """

    grace_s: float
    wait_s: float = 0.0
    term_group: bool = False
    kill_wait_s: float | None = None
    leftovers: signal.Signals | None = signal.SIGKILL


async def _wait(proc: trio.Process, timeout: float | None) -> None:
    with trio.move_on_after(float("inf") if timeout is None else timeout):
        await proc.wait()


async def stop(proc: trio.Process, plan: StopPlan) -> None:
    """Stop a child spawned by `spawn` as `plan` says; returns once the plan's last step is taken."""
    if proc.returncode is None and plan.wait_s > 0:
        await _wait(proc, plan.wait_s)
    if proc.returncode is None:
        send_signal(proc.pid, signal.SIGTERM, group=plan.term_group)
        await _wait(proc, plan.grace_s)
        if proc.returncode is None:
            send_signal(proc.pid, signal.SIGKILL, group=True)
            await _wait(proc, plan.kill_wait_s)
    if plan.leftovers is not None:
        send_signal(proc.pid, plan.leftovers, group=True)


class StderrTail:
    """The end of a child's stderr, bounded, for error messages: its last `lines` lines (blank ones skipped with
    `skip_blank`; one longer than `line_bytes` cut to its head, at most `framing.HEAD_BYTES`), and its last `max_bytes` bytes as written.
    `on_line` sees every line (a bridge logs them)."""

    def __init__(
        self,
        lines: int = TAIL_LINES,
        *,
        max_bytes: int = TAIL_BYTES,
        line_bytes: int = TAIL_LINE_BYTES,
        skip_blank: bool = False,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self._lines: deque[str] = deque(maxlen=lines)
        self._bytes = bytearray()
        self._max_bytes = max_bytes
        self._line_bytes = line_bytes
        self._reader = framing.LineReader(line_bytes)
        self._skip_blank = skip_blank
        self._on_line = on_line

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    @property
    def text(self) -> str:
        """The last `max_bytes` bytes, decoded (a character cut at the start reads as U+FFFD)."""
        return self._bytes.decode("utf-8", errors="replace")

    def add(self, line: str) -> None:
        """One line of the tail (a bridge adds what it knows of a failed spawn)."""
        if self._skip_blank and not line.strip():
            return
        self._lines.append(line)
        if self._on_line is not None:
            self._on_line(line)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._bytes += data
        del self._bytes[: -self._max_bytes]
        for line in self._reader.feed(data):
            cut = line if isinstance(line, bytes) else line.head[: self._line_bytes]
            self.add(cut.decode("utf-8", errors="replace"))

    def close(self) -> None:
        """The end of stderr: an unterminated last line joins the tail."""
        for line in self._reader.close():
            self.add(line.decode("utf-8", errors="replace"))

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        """Read `stream` to its end (or until it breaks or is closed) into the tail, then close it: a finished pipe's
        descriptor is not left for the garbage collector to close (a process object in a reference cycle holds it
        until a full collection, and a daemon that stops idle bridges all day would pile them up meanwhile)."""
        try:
            while data := await stream.receive_some():
                self.feed(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)
        self.close()

"""A bridge's provider processes: the long-lived agent child (`Child`) and one-shot commands (`run_once`).

Every agent bridge runs its CLI the same way, so the mechanics live here once, on `bbridge.wire.process` (which
the daemon uses for its own children): the child leads its own session and process group with exactly the
environment the bridge built (`env_without_runtime` strips what only the runtime may set, protocol.md §5.5),
its pipes are teed into the provider lanes in record mode (`record_child_io`, §5.3), its stderr is kept as a
bounded tail for the bridge's error messages, its stdout is read as bounded LF-framed lines, and it is stopped by
the bridge's `StopPlan` (the bridge's spec sets the order and the timings). What the lines mean, the bridge's
framing above lines and its request correlation, stays in the bridge's `child.py`.
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass

import trio

from bbridge.wire import framing, process, tee
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, Recorder, record_dir_from_env, sanitize_scope
from bbridge.wire.process import StderrTail, StopPlan
from bbridge.wire.redact import REDACT_ENV, Redactor
from bbridge.wire.redact import from_env as redactions_from_env

__all__ = [
    "Child",
    "Completed",
    "StderrTail",
    "StopPlan",
    "env_without_runtime",
    "process_recorder",
    "record_child_io",
    "run_once",
]

RUNTIME_ONLY_ENV = ("BB_PROVIDER_BRIDGE_RECORD_DIR", REDACT_ENV, "ELECTRON_RUN_AS_NODE")


# -- record mode (provider lanes) ---------------------------------------------


def env_without_runtime(env: Mapping[str, str]) -> dict[str, str]:
    """A child's environment: no record dir (a recorded child never records) and no Electron flag (§5.5)."""
    return {k: v for k, v in env.items() if k not in RUNTIME_ONLY_ENV}


@functools.cache
def process_recorder() -> Recorder | None:
    """The process-wide recorder (one `run`, one `seq` for every lane), or None when recording is off; it redacts
    with the list the daemon handed down (`BB_PROVIDER_BRIDGE_RECORD_REDACT`)."""
    root = record_dir_from_env()
    return Recorder(root, redactor=Redactor(redactions_from_env())) if root is not None else None


def record_child_io(
    stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream, *, thread_id: str | None
) -> tuple[trio.abc.SendStream, trio.abc.ReceiveStream]:
    """Wrap a provider child's pipes so its lines land in the `bridge→provider` / `provider→bridge` lanes.

    Call right after spawning, with the bb thread the child serves (None for process-wide work such as
    `model/list`). Returns the pipes unchanged when recording is off. Oversized and unterminated final lines
    are not recorded.
    """
    recorder = process_recorder()
    if recorder is None:
        return stdin, stdout
    scope = sanitize_scope(thread_id)
    return tee.tee(
        stdin,
        stdout,
        lambda line: recorder.record(BRIDGE_TO_PROVIDER, scope, line),
        lambda line: recorder.record(PROVIDER_TO_BRIDGE, scope, line),
    )


# -- the agent child -----------------------------------------------------------


class Child:
    """One provider process: `spawn`, read `lines` (or run a connection on `stdin`/`stdout`), `pump_stderr` into
    `stderr`, `write`, then `stop` with the bridge's plan.

    `thread_id` scopes its record-mode lanes (None: the process scope); `record=False` leaves it out of them, and
    `stderr=False` discards its stderr (a probe whose words no message quotes).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | None,
        thread_id: str | None,
        tail: StderrTail | None = None,
        record: bool = True,
        stderr: bool = True,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.thread_id = thread_id
        self.stderr = tail if tail is not None else StderrTail()
        self.proc: trio.Process | None = None
        self.stdin: trio.abc.SendStream | None = None  # None once closed
        self.stdout: trio.abc.ReceiveStream | None = None
        self._record = record
        self._pipe_stderr = stderr
        self._write_lock = trio.Lock()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: the signal that ended it)."""
        return None if self.proc is None else self.proc.returncode

    async def spawn(self) -> trio.Process:
        """Start the child in its own process group, its pipes teed in record mode; `OSError` when it cannot."""
        proc = await process.spawn(self.argv, env=self.env, cwd=self.cwd, stderr=self._pipe_stderr)
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        stdin: trio.abc.SendStream = proc.stdin
        stdout: trio.abc.ReceiveStream = proc.stdout
        if self._record:
            stdin, stdout = record_child_io(stdin, stdout, thread_id=self.thread_id)
        self.stdin, self.stdout = stdin, stdout
        return proc

    async def pump_stderr(self) -> None:
        """Read the child's stderr into the tail until it ends."""
        assert self.proc is not None and self.proc.stderr is not None
        await self.stderr.pump(self.proc.stderr)

    async def lines(self, max_bytes: int = framing.MAX_LINE_BYTES) -> AsyncGenerator[bytes]:
        """The child's stdout as lines split on LF only (one trailing CR removed; an oversized line skipped), the
        unterminated last one included, until the pipe ends, breaks or is closed."""
        assert self.stdout is not None
        reader = framing.LineReader(max_bytes)
        try:
            while data := await self.stdout.receive_some():
                for line in reader.feed(data):
                    if isinstance(line, bytes):
                        yield line
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        for line in reader.close():
            yield line

    async def write(self, data: bytes) -> bool:
        """Write to the child's stdin (one writer at a time); False when its stdin is closed or broken."""
        async with self._write_lock:
            if self.stdin is None:
                return False
            try:
                await self.stdin.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
            return True

    async def close_stdin(self) -> None:
        """End the child's input at once: a write blocked on a child that stopped reading fails (False), as do
        writes after it."""
        stdin, self.stdin = self.stdin, None
        if stdin is not None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stdin.aclose()

    async def wait(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    async def stop(self, plan: StopPlan, *, close_stdin: bool = True) -> None:
        """Close stdin (unless told not to), then stop the child as `plan` says (`process.stop`)."""
        if close_stdin:
            await self.close_stdin()
        if self.proc is not None:
            await process.stop(self.proc, plan)

    def kill_group(self) -> None:
        """SIGKILL the child's whole group at once (whatever outlived it too)."""
        if self.proc is not None:
            process.send_signal(self.proc.pid, signal.SIGKILL, group=True)


# -- one-shot commands -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes


async def run_once(
    argv: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: str | None = None
) -> Completed | None:
    """Run a short command (a `--version`, npm) to completion in its own process group with no input and its output
    captured; None when it outlives `timeout` (its group is killed); `OSError` when it cannot start."""
    with trio.move_on_after(timeout):
        done = await trio.run_process(
            list(argv),
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            deliver_cancel=_kill_group,
        )
        return Completed(done.returncode, done.stdout, done.stderr)
    return None


async def _kill_group(proc: trio.Process) -> None:
    """A one-shot past its timeout is killed outright, with whatever it started: its answer no longer matters."""
    process.send_signal(proc.pid, signal.SIGKILL, group=True)

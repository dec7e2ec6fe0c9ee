"""`bbridge status` and `bbridge tail`: an operator's view of a daemon already running on a socket.

Both are clients of the daemon's API through `bbridge.client` (daemon.md §1, §3): `Client.connect` sends
`initialize` (with the token when the daemon wants one), then they ask `daemon/status` or follow the
`thread/events` notifications every client is sent. `tail` prints each thread's events exactly once and in
`seq` order: a journal replay (`thread/events {threadId, afterSeq}`) fills whatever the live notifications did
not carry, and anything seen twice is dropped by `seq`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import msgspec
import trio
from msgspec import UNSET

from bbridge import logs
from bbridge.client import Client, DaemonError, Disconnected
from bbridge.run import Renderer
from bbridge.wire import client as api
from bbridge.wire import errors

_SECTIONS = (
    "daemon",
    "providers",
    "threads",
    "pending",
    "counters",
    "config",
)  # rendered field by field; others generically


class OpsError(Exception):
    """A reason to stop, said in one line (exit status 1)."""


def read_token(path: Path | None) -> str | None:
    return path.read_text(encoding="utf-8").strip() if path is not None else None


async def _session(
    socket: Path, token: str | None, body: Callable[[Client], Awaitable[None]], ctrl_c_ends: bool = False
) -> None:
    """Connect and initialize, run `body`, close; every failure comes out as one `OpsError`.

    With `ctrl_c_ends`, SIGINT ends `body` as if it had returned (exit 0): a KeyboardInterrupt would leave trio
    inside an exception group.
    """
    failure: str | None = None
    connected = False
    async with trio.open_nursery() as nursery:
        if ctrl_c_ends:
            nursery.start_soon(_cancel_on_ctrl_c, nursery.cancel_scope)
        try:
            async with Client.connect(socket, token=token) as client:
                connected = True
                await body(client)
        except OSError as exc:
            if connected:
                raise  # not the socket's (the client says a dropped connection with Disconnected)
            failure = f"no daemon is listening on {socket} ({exc.strerror or exc})"
        except Disconnected:
            failure = f"the daemon on {socket} closed the connection"
        except DaemonError as exc:
            failure = exc.message
            if exc.code == errors.UNAUTHORIZED and not connected:
                given = "the token given" if token is not None else "a client without a token (see --token-file)"
                failure = f"the daemon on {socket} refused {given}: {exc.message}"
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise OpsError(failure)  # raised in the nursery it would come out wrapped in an exception group


async def _cancel_on_ctrl_c(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT) as interrupts:
        async for _ in interrupts:
            scope.cancel()


def _run(command: str, main: Callable[[], Awaitable[None]]) -> int:
    logs.configure("warning")  # stdout is the output: logs go to stderr
    try:
        trio.run(main)
    except OpsError as exc:
        print(f"bbridge {command}: {exc}", file=sys.stderr)
        return 1
    return 0


# -- status -------------------------------------------------------------------


CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: each --watch refresh replaces the last


def status_main(
    socket: Path, token: str | None, as_json: bool, out: TextIO = sys.stdout, watch: float | None = None
) -> int:
    """One `daemon/status`, or with `watch` one every `watch` seconds until Ctrl-C (or the daemon goes away)."""

    async def show(client: Client) -> None:
        status = await client.request("daemon/status")
        if as_json:
            out.write(msgspec.json.encode(status).decode() + "\n")  # the daemon's own encoding: its bytes
        else:
            lines = format_status(status)
            out.write((CLEAR if watch is not None else "") + "".join(f"{line}\n" for line in lines))
        out.flush()

    async def ask(client: Client) -> None:
        await show(client)
        while watch is not None:  # Ctrl-C ends the watch: exit 0
            await trio.sleep(watch)
            await show(client)

    async def main() -> None:
        await _session(socket, token, ask, ctrl_c_ends=watch is not None)

    return _run("status", main)


def format_status(status: dict[str, Any]) -> list[str]:
    """The `daemon/status` answer as readable lines; sections this version does not know are shown key by key."""
    daemon = status.get("daemon") or {}
    lines = [
        f"daemon: {daemon.get('name', '?')} {daemon.get('version', '?')}, up {_duration(daemon.get('uptimeS'))}, "
        f"{_plural(daemon.get('clients', 0), 'client')} (this one included)"
    ]
    providers = status.get("providers") or []
    lines.append("providers:" if providers else "providers: none")
    width = max((len(p.get("providerId", "")) for p in providers), default=0)
    for provider in providers:
        text = f"  {provider.get('providerId', '?'):<{width}}  {provider.get('state', '?')}"
        if provider.get("reason"):
            text += f": {provider['reason']}"  # why it failed
        if provider.get("pid") is not None:
            text += f", pid {provider['pid']}, up {_duration(provider.get('uptimeS'))}"
            text += f", {_plural(provider.get('threads', 0), 'thread')}"
        lines.append(text)
    threads = status.get("threads") or []
    lines.append(
        f"threads: {len(threads)}, pending requests: {status.get('pending', 0)}" if threads else "threads: none"
    )
    lines.extend(_thread_table(threads))
    lines.extend(_section("counters", status.get("counters")))
    if "config" in status:
        lines.extend(_config(status["config"]))
    for key, value in status.items():
        if key not in _SECTIONS:
            lines.extend(_section(key, value))
    return lines


THREAD_COLUMNS = ("THREAD", "PROVIDER", "TURN", "AGE", "SINCE BRIDGE", "WAITING ON", "CLIENTS", "BRIDGE", "SEQ")


def _thread_table(threads: list[dict[str, Any]]) -> list[str]:
    """One row per thread: its open turn and age, how long the bridge has been quiet, what it waits on."""
    if not threads:
        return []
    rows = [THREAD_COLUMNS]
    for thread in threads:
        turn = thread.get("openTurn") or {}
        waiting = ", ".join(
            f"{w.get('kind', '?').replace('_', ' ')} {_duration(w.get('ageS'))}" for w in thread.get("waitingOn") or []
        )
        clients = thread.get("clients") or {}
        bridge = thread.get("bridge") or {}
        rows.append(
            (
                str(thread.get("threadId", "?")),
                str(thread.get("providerId") or "-"),
                str(turn.get("turnId", "-")),
                _duration(turn["ageS"]) if "ageS" in turn else "-",
                _duration(thread["sinceBridgeS"]) if thread.get("sinceBridgeS") is not None else "-",
                waiting or "-",
                f"owner {clients['owner']}" if clients.get("owner") else "no owner",
                f"{bridge.get('state', '?')} pid {bridge.get('pid')}" if bridge else "-",
                str(thread.get("lastSeq", 0)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(THREAD_COLUMNS))]
    return ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _config(config: Any) -> list[str]:
    """Where the providers came from and each refused entry, one line each."""
    if not isinstance(config, dict):
        return _section("config", config)
    lines = ["config:", f"  path: {_value(config.get('path'))}"]
    refused = config.get("refused") or []
    lines.append(f"  refused: {len(refused) or 'none'}")
    for entry in refused:
        if isinstance(entry, dict):
            lines.append(f"    [{entry.get('section', '?')}] {entry.get('key', '?')}: {entry.get('error', '?')}")
        else:
            lines.append(f"    {_value(entry)}")
    rest = {key: value for key, value in config.items() if key not in ("path", "refused")}
    return lines + _section("config", rest)[1:]


def _section(name: str, value: Any) -> list[str]:
    """Any section: an object key by key, a list item by item, anything else on the heading line."""
    if isinstance(value, dict):
        return [f"{name}:", *(f"  {key}: {_value(item)}" for key, item in value.items())]
    if isinstance(value, list):
        return [f"{name}:" if value else f"{name}: none", *(f"  - {_value(item)}" for item in value)]
    return [f"{name}: {_value(value)}"]


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.1f}s"
    hours, rest = divmod(whole, 3600)
    return (f"{hours}h" if hours else "") + f"{rest // 60:02d}m{rest % 60:02d}s"


# -- tail ---------------------------------------------------------------------


class Tail:
    """Follows threads over one connection, printing each `seq` once and in order.

    The daemon sends this client every event journaled after it connected, in
    order, so a replay asked after connecting leaves no gap: notifications that
    arrive meanwhile wait in the client's queue (`Client.notifications`) and
    those the replay already held are dropped by `seq`. A thread met live
    without a replay starts at that event.
    """

    def __init__(self, out: TextIO, as_json: bool, thread_id: str | None) -> None:
        self.out = out
        self.as_json = as_json
        self.only = thread_id
        self.view = Renderer(out)
        self.last: dict[str, int] = {}  # thread id -> the last seq printed

    async def follow(self, client: Client, after_seq: int | None) -> None:
        """Replay first (the one thread, or with `after_seq` every thread the daemon knows), then live."""
        try:
            if self.only is not None:
                await self.replay(client, self.only, after_seq or 0)
            elif after_seq is not None:
                for thread in (await client.status()).threads:
                    await self.replay(client, thread["threadId"], after_seq)
        except Disconnected:
            return  # the daemon went away mid-replay: the end of the tail, like any other close
        async for note in client.notifications():  # ends when the daemon closes the connection
            if note.method != "thread/events":
                continue
            batch = msgspec.convert(note.params, api.ThreadEventsNotification)
            if self.only is not None and batch.threadId != self.only:
                continue
            for entry in batch.events:
                if entry.seq > self.last.setdefault(batch.threadId, entry.seq - 1):
                    self.show(batch.threadId, entry)

    async def replay(self, client: Client, thread_id: str, after: int) -> None:
        self.last[thread_id] = after
        answer = await client.thread_events(thread_id, after)
        if answer.missingThrough is not UNSET:
            print(
                f"bbridge tail: {thread_id}: the journal no longer holds seq {after + 1} "
                f"through {answer.missingThrough}",
                file=sys.stderr,
            )
        for entry in answer.events:
            self.show(thread_id, entry)

    def show(self, thread_id: str, entry: api.Entry) -> None:
        self.last[thread_id] = entry.seq
        if self.as_json:
            record = {"threadId": thread_id, "seq": entry.seq, "event": entry.event}
            self.out.write(msgspec.json.encode(record).decode() + "\n")
        else:
            lead = "" if self.only is not None else f"[{thread_id}] "
            self.view.render(entry.event, lead)
        self.out.flush()


def tail_main(
    socket: Path,
    token: str | None,
    thread_id: str | None,
    after_seq: int | None,
    as_json: bool,
    out: TextIO = sys.stdout,
) -> int:
    tail = Tail(out, as_json, thread_id)

    async def main() -> None:
        async def follow(client: Client) -> None:
            await tail.follow(client, after_seq)

        await _session(socket, token, follow, ctrl_c_ends=True)

    try:
        return _run("tail", main)
    finally:
        tail.view.line(None)  # end a streamed-text run left open
        out.flush()

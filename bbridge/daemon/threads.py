"""Every thread the daemon serves, one record each, and what a release clears (`LETS_GO`, applied by
`supervisor.Supervisor.release`: the one place a thread is let go).

A thread's record (`ThreadRecord`) holds what the daemon learnt when a client constructed it — its provider
(which routes a later request that names none), the client that owns it (asked first by the thread's bridge
requests), the tools it declared with the daemon's hosted tools it chose among them (`daemon/offered_tools.py`), and
its `cwd` — and what is live on it: its watchdog state (`watchdog.Watch`: a dispatched
turn not yet started, its open turns, and where to read when its bridge last sent something for it: its
assembler's state of the thread) and its open pending requests (the
`pending.Pending` the thread waits on a person for, oldest first) and its running hosted tool calls (each a
cancel scope: a `thread/stop`, a release and its bridge's exit cancel them). `liveness` reads the live part for
`daemon/status` (and, next, a web page and metrics).

A thread no client constructed still gets a record when its bridge arms a watchdog for it (a `turn/start` on a
thread the daemon never constructed, a thread learnt from `thread/identity` that starts a turn) or asks a
person for it (`record`): it has no provider, owner or tools (`provider_id` is None, so it routes nothing and
lends no tools), and it lasts only while it holds something (`drop_if_empty`: a watch armed, a pending
request), so a bridge's unknown threads cost nothing once idle. A thread's watch itself lasts while something is
armed (a dispatched turn, an open turn): its bridge's watchdogs drop it when the last settles. A pending request
that names no thread is in no record: `Interactions` (by request id) still holds and answers it.

Three structures are indexed otherwise for speed and stay where they are, the registry owning their lifetime:
the provider thread ids (`provider_threads`, shared with each bridge's compiled delivery, which stamps every
event from it and updates it on a `thread/identity` event), a bridge's members (`BridgeProcess.threads`, which
the threads its assembler newly hears from join after each read: `Assembler.arrivals`) and the threads each
bridge's watchdogs sweep (`Watchdogs.watched`, with its provider's timeouts, over the records' state); the open
work (`Tracker`) is fed per lifecycle event.

What each way of letting a thread go clears is `LETS_GO`: the record's part here (`let_go`), the bridge's in
`BridgeProcess.let_go`. What a thread is not let go of:

* its record and provider thread id: kept for `daemon/status`, and so a request without `providerId` still
  finds the provider after a release or a bridge restart;
* its owner: cleared only when the owning client goes away (`owner_left`), never by a release;
* its pending requests: resolved by policy before a `thread/stop` (any intent) is sent
  (`relays.Relays.resolve_thread`) and, for a bridge that exits, by provider before its threads are let go
  (`relays.Relays.resolve_provider`: a request may name no thread); each resolution leaves the record
  (`Interactions.resolve`), so a released thread's record holds none unless its bridge asked again meanwhile;
* its assembly state and bridge mistakes: bounded caches (the assembler's idle-state LRU, `Mistakes.MAX_THREADS`),
  never released by thread; its journal's entries only when it has a file (`Piece.EVENTS`: the file has them all),
  the in-memory journal (the newest `--journal-bound` per thread) being all a daemon without one has.

A hidden thread (a construction's `hidden {runId, role}`: one a room runs for itself) carries its mark on its record
(`hidden`, kept by `hidden.HiddenThreads`, read back after a restart): a release keeps it, as it keeps the name.

An idle release (`Cause.IDLE`: the daemon's own `thread/stop {intent: "release"}` of a thread idle past its provider's
`idle_release_s`, `idle.Reaper`) lets go what a client's release does; the record remembers it (`parked`, until the
next construction), with what a resume needs (`construction`, the latest construction's params) and what the reaping
reads (`idle_since`, `restorable`), so the thread's next turn resumes it first.

A `thread/discard` and a `session/replaced` notice let nothing go here: the bridge drops or replaces its session,
and the daemon forwards them as any other method or notice.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from bbridge.daemon.declared_tools import Tool
from bbridge.daemon.fanout import ClientSink
from bbridge.daemon.pending import Pending
from bbridge.daemon.watchdog import Watch
from bbridge.seams.tool_host import ToolHost
from bbridge.wire.client_api import HiddenThread


class Cause(enum.Enum):
    """Why a thread is let go."""

    RELEASED = "released"  # its bridge answered a `thread/stop` with intent `release`
    IDLE = "released idle"  # the daemon released it, idle past its provider's `idle_release_s` (`idle.Reaper`)
    BRIDGE_EXITED = "bridge exited"  # its bridge process ended; its open work is settled as failed


class Piece(enum.Enum):
    """A part of a thread's state that a release may clear."""

    TOOLS = "tools"  # the declared dynamicTools, the hosted ones among them, and the tool host's session grants
    HOSTED_CALLS = "hosted calls"  # its running hosted tool calls, cancelled
    WATCHDOGS = "watchdogs"  # its watch (pending turn start, open turns, last traffic); its bridge stops sweeping it
    TRACKER = "tracker"  # its open work, settled as failed
    GUARD = "guard"  # its grammar guard state in its bridge
    MEMBERSHIP = "membership"  # its place in `BridgeProcess.threads`
    INPUTS = "inputs"  # its turn inputs held in memory, when its journal keeps them (`Inputs.let_go`)
    EVENTS = "events"  # its journal entries in memory and its open journal file, when it has one (`Journal.let_go`)


LETS_GO: Final[dict[Cause, frozenset[Piece]]] = {
    # A released thread may be resumed later (a construction declares its tools again); the daemon keeps its
    # record and open work, and the bridge stops counting it. Its turn inputs and events leave memory when its
    # journal has them, and its journal file is closed (without a journal they stay: nothing else holds them).
    Cause.RELEASED: frozenset(
        {Piece.GUARD, Piece.WATCHDOGS, Piece.MEMBERSHIP, Piece.TOOLS, Piece.HOSTED_CALLS, Piece.INPUTS, Piece.EVENTS}
    ),
    # An idle release is a release the daemon asked for: the same pieces, and the record remembers it (`parked`), so
    # the thread's next turn resumes it first.
    Cause.IDLE: frozenset(
        {Piece.GUARD, Piece.WATCHDOGS, Piece.MEMBERSHIP, Piece.TOOLS, Piece.HOSTED_CALLS, Piece.INPUTS, Piece.EVENTS}
    ),
    # A dead bridge's guard and members go with its process; its threads keep their tools for the next process,
    # but nobody can use the answer of a hosted call it asked for.
    Cause.BRIDGE_EXITED: frozenset({Piece.TRACKER, Piece.WATCHDOGS, Piece.HOSTED_CALLS}),
}


@dataclass(eq=False, slots=True)
class HostedRun:
    """A running hosted tool call: its cancel scope, and why it was cancelled (for the bridge's failed result)."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    reason: str | None = None

    def cancel(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()


@dataclass(eq=False, slots=True)
class ThreadRecord:
    """One thread the daemon serves: what its construction said, and what is live on it."""

    thread_id: str
    provider_id: str | None  # the provider of its latest construction; None: no client constructed it
    owner: ClientSink | None = None  # the client of its latest construction, while it is connected
    tools: dict[str, Tool] = field(default_factory=dict)  # the latest successful construction's dynamicTools
    hosted: frozenset[str] = frozenset()  # the names among `tools` the daemon's tool host answers
    cwd: str | None = None  # the latest successful construction's `cwd` (where its hosted tools run)
    calls: set[HostedRun] = field(default_factory=set)  # its running hosted tool calls
    watch: Watch | None = None  # its watchdog state while a turn is dispatched or open (a release clears it)
    pending: dict[str, Pending] = field(default_factory=dict)  # its open requests by request id, oldest first
    name: str | None = None  # its latest `thread/name/updated` event's name (with --journal, read back at a restart)
    hidden: HiddenThread | None = None  # a room's own thread: its run and role (with --journal, read back at a restart)
    # its latest construction's or turn's `options` as the client sent them, less the daemon's `tools` (what a hosted
    # tool's call is told of its caller)
    options: dict[str, Any] | None = None
    # idle reaping (`idle.py`, protocol.md §4.7): since when its session has had no dispatched or open turn (None: it
    # has one, or no session yet), whether its session can be restored (its latest construction's or identity's
    # `sessionRestorable`; None: not said), its latest construction's params as the client sent them (what resumes it)
    # and whether the daemon released it idle (its next turn resumes it first)
    idle_since: float | None = None
    restorable: bool | None = None
    construction: dict[str, Any] | None = None
    parked: bool = False


@dataclass(frozen=True)
class Session:
    """What a construction's answer tells idle reaping (`ThreadRegistry.constructed`)."""

    params: dict[str, Any]  # the construction's params as the client sent them
    restorable: bool | None  # its `sessionRestorable` (None: not said)
    now: float  # when it was answered (the daemon's clock)


@dataclass(frozen=True)
class Liveness:
    """What a thread is doing now (`ThreadRegistry.liveness`), in seconds."""

    turn_id: str | None  # its newest open turn
    turn_age_s: float | None  # since that turn started
    silence_s: float | None  # since its bridge last sent anything for it, while that turn is open
    start_pending: bool  # a dispatched turn the provider has not started yet
    waiting: tuple[Pending, ...]  # the requests it waits on a person for, oldest first

    @property
    def waiting_count(self) -> int:
        return len(self.waiting)


class ThreadRegistry:
    """The daemon's threads: their records, their provider thread ids, and where each is let go."""

    def __init__(self, tool_host: ToolHost | None = None) -> None:
        self.records: dict[str, ThreadRecord] = {}
        self.provider_threads: dict[str, str] = {}  # bb thread → provider thread; shared with every `Delivery`
        self.busy: dict[str, int] = {}  # the requests in flight on each thread (`idle.Reaper.in_flight`)
        self._tool_host = tool_host

    # -- learning a thread ----------------------------------------------------------------------------------

    def construct(self, thread_id: str, provider_id: str, owner: ClientSink) -> None:
        """A construction (`thread/start`, `thread/resume`, `thread/fork`) about to be sent to its bridge."""
        record = self.records.get(thread_id)
        if record is None:
            self.records[thread_id] = ThreadRecord(thread_id, provider_id, owner)
        else:
            record.provider_id, record.owner = provider_id, owner

    def constructed(
        self,
        thread_id: str,
        tools: dict[str, Tool] | None,
        provider_thread_id: str | None,
        hosted: frozenset[str] = frozenset(),
        cwd: str | None = None,
        session: Session | None = None,
    ) -> None:
        """A construction's answer: its declared tools win (`None`: the request carried no declaration check), with
        the hosted ones among them and its `cwd`, and the provider thread id it names is recorded; with `session`,
        what idle reaping keeps (the params, `sessionRestorable`, and the session idle from now unless a turn is
        already dispatched or open)."""
        record = self.records.get(thread_id)
        if tools is not None and record is not None:
            record.tools, record.hosted, record.cwd = tools, hosted, cwd
        if provider_thread_id:
            self.provider_threads[thread_id] = provider_thread_id
        if session is not None and record is not None:
            record.construction, record.restorable, record.parked = session.params, session.restorable, False
            if record.watch is None:
                record.idle_since = session.now

    def identify(self, thread_id: str, provider_thread_id: str, restorable: bool | None = None) -> None:
        """A provider thread id learnt before or outside an answer (a resume's, a `thread/identity` notice, with the
        session's `sessionRestorable` when it says it: a replacement session says it again, protocol.md §4.3)."""
        self.provider_threads[thread_id] = provider_thread_id
        record = self.records.get(thread_id)
        if restorable is not None and record is not None:
            record.restorable = restorable

    def record(self, thread_id: str) -> ThreadRecord:
        """The thread's record; one with no provider for a thread no client constructed, made on first use (a
        bridge's watchdog armed for it, a pending request of it)."""
        record = self.records.get(thread_id)
        if record is None:
            record = self.records[thread_id] = ThreadRecord(thread_id, None)
        return record

    def named(self, thread_id: str, name: str) -> None:
        """A `thread/name/updated` event delivered: the name `daemon/status` shows (kept while the record is)."""
        self.record(thread_id).name = name

    def hide(self, thread_id: str, mark: HiddenThread) -> None:
        """The thread is a room's own (`hidden.HiddenThreads` keeps the mark beside the journal and tells clients)."""
        self.record(thread_id).hidden = mark

    def configured(self, thread_id: str, options: dict[str, Any] | None) -> None:
        """A construction or turn the bridge accepted: its `options` (none sent: the thread's stay as they were)."""
        record = self.records.get(thread_id)
        if record is not None and options is not None:
            record.options = options

    def owner_left(self, client: ClientSink) -> None:
        """A client went away: its threads have no owner until a construction names one."""
        for record in self.records.values():
            if record.owner is client:
                record.owner = None

    # -- reading ----------------------------------------------------------------------------------------------

    def get(self, thread_id: str) -> ThreadRecord | None:
        return self.records.get(thread_id)

    def provider_of(self, thread_id: str) -> str | None:
        record = self.records.get(thread_id)
        return None if record is None else record.provider_id

    def owner_of(self, thread_id: str) -> ClientSink | None:
        record = self.records.get(thread_id)
        return None if record is None else record.owner

    def name_of(self, thread_id: str) -> str | None:
        record = self.records.get(thread_id)
        return None if record is None else record.name

    def hidden_of(self, thread_id: str) -> HiddenThread | None:
        record = self.records.get(thread_id)
        return None if record is None else record.hidden

    def tools_of(self, thread_id: str | None) -> dict[str, Tool]:
        record = self.records.get(thread_id) if thread_id is not None else None
        return {} if record is None else record.tools

    def hosted_of(self, thread_id: str) -> frozenset[str]:
        """The names of the thread's tools the daemon's tool host answers."""
        record = self.records.get(thread_id)
        return frozenset() if record is None else record.hosted

    def on_provider(self, thread_id: str, provider_id: str) -> bool:
        """Whether the thread was constructed on that provider (another provider's thread never lends its tools)."""
        record = self.records.get(thread_id)
        return record is not None and record.provider_id == provider_id

    def waiting(self, thread_id: str) -> list[Pending]:
        """The requests the thread waits on a person for, oldest first."""
        record = self.records.get(thread_id)
        return [] if record is None else list(record.pending.values())

    def liveness(self, thread_id: str, now: float) -> Liveness:
        """The thread's open turn and its age, its bridge's silence on it, and the requests waiting on a person."""
        record = self.records.get(thread_id)
        watch = None if record is None else record.watch
        turn = None if watch is None else watch.open_turn()
        return Liveness(
            None if turn is None else turn.turn_id,
            None if turn is None else now - turn.started,
            None if turn is None else now - turn.last_activity,
            watch is not None and watch.start is not None,
            () if record is None else tuple(record.pending.values()),
        )

    def by_provider_thread(self, provider_thread_id: object, provider_id: str) -> str | None:
        """The bb thread of a provider thread on that provider."""
        return next(
            (
                tid
                for tid, ptid in self.provider_threads.items()
                if ptid == provider_thread_id and self.on_provider(tid, provider_id)
            ),
            None,
        )

    def of_provider(self, provider_id: str, served: Iterable[str]) -> Iterator[str]:
        """The threads constructed on the provider, then those of `served` (what its bridge serves or watches) that
        no client constructed."""
        for thread_id, record in self.records.items():
            if record.provider_id == provider_id:
                yield thread_id
        for thread_id in served:
            if self.provider_of(thread_id) is None:
                yield thread_id

    # -- letting go ---------------------------------------------------------------------------------------------

    def let_go(self, thread_id: str, cause: Cause) -> None:
        """What of the record `LETS_GO` names for `cause` (its watch, running hosted calls, tools and the tool
        host's grants); a record no client constructed goes too if it holds nothing else. The bridge's part of a
        release is `BridgeProcess.let_go`; `Supervisor.release` does both."""
        pieces = LETS_GO[cause]
        record = self.records.get(thread_id)
        if record is None:
            return
        if Piece.WATCHDOGS in pieces:
            record.watch = None
        if Piece.HOSTED_CALLS in pieces:
            self.cancel_calls(thread_id, f"the thread was let go ({cause.value})")
        if Piece.TOOLS in pieces:
            record.tools, record.hosted = {}, frozenset()
            if self._tool_host is not None:
                self._tool_host.forget(thread_id)
        if cause is Cause.IDLE:
            record.parked = True
        self.drop_if_empty(thread_id)

    def cancel_calls(self, thread_id: str, reason: str) -> int:
        """Cancel the thread's running hosted tool calls (each answers its bridge as failed, saying `reason`)."""
        record = self.records.get(thread_id)
        runs = list(record.calls) if record is not None else []
        for run in runs:
            run.cancel(reason)
        return len(runs)

    def drop_if_empty(self, thread_id: str) -> None:
        """A record no client constructed lasts while it holds something: a watch armed, a pending request, a name,
        a hidden mark."""
        record = self.records.get(thread_id)
        if (
            record is not None
            and record.provider_id is None
            and record.watch is None
            and not record.pending
            and record.name is None
            and record.hidden is None
        ):
            self.records.pop(record.thread_id, None)

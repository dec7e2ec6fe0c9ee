"""Bridge output to clients: `thread/delta` through each bridge's compiled delivery, the forwarded
notifications, and daemon-made events on a bridge's threads (warnings, flushes), out through the fan-out.

Bridge `thread/delta` notifications flow decode → assemble → stamp → check (extension payloads, grammar guard)
→ journal → every client, one `thread/events` message per notification; all but the decode is one compiled
call per read (`bbridge.core.event_log.Delivery.take_notes`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
import structlog
import trio

from bbridge.core import grammar
from bbridge.core.event_log import NOT_DUE, Delivery
from bbridge.core.events import Event
from bbridge.daemon import mistakes
from bbridge.daemon.bridge import BridgeProcess, env_advice
from bbridge.daemon.counters import Counters, TurnDurations
from bbridge.daemon.extensions import CHECKED_TYPES, ExtensionChecker
from bbridge.daemon.fanout import Fanout
from bbridge.daemon.journal import append_record, beside, latest_beside
from bbridge.daemon.ledger import OBSERVED_TYPES as LEDGER_TYPES
from bbridge.daemon.ledger import Ledger
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.daemon.watchdog import Watchdogs
from bbridge.wire import rpc

log = structlog.get_logger("bbridge.daemon.runtime")

NAMED = "thread/name/updated"  # a thread's name, for `daemon/status` (rare: one set lookup per event, as the rest)
NAMES = "names"  # `<thread>.names.ndjson`: a journaled thread's names, read back at a restart
# the events the delivery collects for `_take_notices` (token usage for the ledger: a few per turn, never per delta);
# the rest pass the tracker, watchdogs and ledger untouched
_LIFECYCLE = Tracker.OBSERVED_TYPES | Watchdogs.OBSERVED_TYPES | {NAMED} | LEDGER_TYPES


class ThreadParams(msgspec.Struct):
    threadId: str | None = None
    providerThreadId: str | None = None
    sessionRestorable: bool | None = None  # a construction's answer: whether the session can be resumed later


class _Identity(msgspec.Struct):
    threadId: str
    providerThreadId: str
    sessionRestorable: bool | None = None


class _Replaced(msgspec.Struct):
    threadId: str
    reason: str
    providerThreadId: str | None = None
    contextLost: bool = False


# A read of more notifications than this sends its first events before assembling the rest (`_let_writers_run`);
# a smaller one is assembled in microseconds, and the early send would cost more than it saves.
EARLY_SEND_MIN = 64
# The flusher wakes this long after the first queued entry is due, and flushes every entry due by then: late by
# at most this much, it wakes a few hundred times a second however many threads stream.
FLUSH_SLACK_S = 0.005


class Output:
    """How bridge output reaches the clients: each bridge's notifications, its due text flushes, and the events
    the daemon makes on a bridge's threads. It owns the flusher's state; it reads the bridges (the supervisor's,
    by provider) and writes the thread records what a delivered event teaches (a name, an identity)."""

    def __init__(
        self,
        fanout: Fanout,
        registry: ThreadRegistry,
        tracker: Tracker,
        bridges: dict[str, BridgeProcess],
        extensions: dict[str, ExtensionChecker],
        counters: Counters,
        turn_durations: TurnDurations,
        noted: mistakes.Mistakes,
        ledger: Ledger | None = None,
    ) -> None:
        self._fanout = fanout
        self._journal = fanout.journal
        self._registry = registry
        self._tracker = tracker
        self._bridges = bridges
        self._extensions = extensions
        self._counters = counters
        self._turn_durations = turn_durations
        self._mistakes = noted
        self._ledger = ledger
        self._flush_wake = trio.Event()
        self._flusher_idle = False  # the flusher waits for `_flush_wake`: no bridge has a flush queued
        self._flushing = False  # a flusher runs (`flusher`); without one, queued flushes are dropped
        self.read_names()  # a journaled thread's name, after a restart

    async def on_notifications(self, bridge: BridgeProcess, batch: list[rpc.Notification]) -> None:
        """One read's notifications, in order; the `thread/events` lines they make go to the clients together.

        Runs of decoded `thread/delta` notifications go through the bridge's delivery in one compiled call
        (`Delivery.take_notes`); this loop sees only the other notes."""
        now = trio.current_time()
        self._counters.notifications_in += len(batch)
        delivery = bridge.delivery
        lines: list[bytes] = []
        deltas_before = delivery.deltas
        now_ms, count, i = now * 1000, len(batch), 0
        early = count > EARLY_SEND_MIN and bool(
            self._fanout.clients
        )  # the first events go out before the rest is assembled
        while i < count:
            stop = i + 1 if early else count
            i = delivery.take_notes(batch, i, stop, now_ms, lines)
            if i < stop:
                lines = self._take_other(bridge, batch[i], now_ms, lines)
                i += 1
            if early and lines:
                early = False
                lines = self._fanout.broadcast(lines)
                self._take_notices(bridge, now)  # nothing else runs before the watchers have seen them
                await _let_writers_run()
        self._fanout.broadcast(lines)
        self._take_notices(bridge, now)
        self._counters.deltas_in += delivery.deltas - deltas_before

    def _take_other(
        self, bridge: BridgeProcess, note: rpc.Notification, now_ms: float, lines: list[bytes]
    ) -> list[bytes]:
        """A note `take_notes` leaves: a `thread/delta` the framing pass did not decode, or another method (what
        came before it goes out first). Returns the lines to go on with."""
        method = note.method
        try:
            if method == "thread/delta":
                params = self._decode_delta(bridge, note.params)
                if params is not None:
                    bridge.delivery.take_params(params, now_ms, lines)
                return lines
            lines = self._fanout.broadcast(lines)
            if method in FORWARDED_NOTIFICATIONS:
                self._on_forwarded(bridge, method, note.params)
            elif method == "error":
                self._on_bridge_error(bridge, note.params)
        except Exception:
            self._counters.failed_notifications += 1
            log.exception(
                "a bridge notification failed; the rest of its batch goes on",
                providerId=bridge.provider_id,
                method=method,
            )
        return lines

    def _decode_delta(self, bridge: BridgeProcess, raw: msgspec.Raw | None) -> grammar.ThreadDeltaParams | None:
        """The params the framing pass left undecoded (screened or not typed): decoded here, or refused."""
        try:
            return grammar.decode_params(raw if raw is not None else b"null")
        except grammar.GrammarError as exc:
            self._counters.rejected_notifications += 1
            log.warning("skipped an invalid thread/delta notification", providerId=bridge.provider_id, error=str(exc))
            return None

    def open_delivery(self, bridge: BridgeProcess) -> Delivery:
        """The bridge's compiled path from deltas to `thread/events` lines: its assembler and guard, this
        daemon's journal, thread identities and extension checks, and the event types the watchers need."""
        checker = self._extensions.get(bridge.provider_id)
        return Delivery(
            bridge.provider_id,
            bridge.assembler,
            bridge.guard,
            self._journal.log,
            self._registry.provider_threads,
            _LIFECYCLE | self._fanout.tracer.observed,  # and what the tracer reads (a turn's usage), if it traces
            None if checker is None else checker.check,
            CHECKED_TYPES,
        )

    def _take_notices(self, bridge: BridgeProcess, now: float) -> None:
        """What the bridge's delivery collected: lifecycle events for the tracker, watchdogs and usage ledger (and a
        thread's name for its record), the guard's
        drops (counted and logged) and the extension check's replacements (counted)."""
        delivery = bridge.delivery
        if delivery.noticed:
            noticed, delivery.noticed = delivery.noticed, []
            tracker, watchdogs = self._tracker, bridge.watchdogs
            provider_errors: list[tuple[str, Event]] = []
            for thread_id, event in noticed:
                tracker.observe(thread_id, event)
                if (closed := watchdogs.observe(thread_id, event, now)) is not None:
                    self._turn_durations.observe(bridge.provider_id, now - closed.started)
                kind = event["type"]
                if kind in LEDGER_TYPES and self._ledger is not None:
                    self._ledger.observe(bridge.provider_id, thread_id, event)
                if kind == "provider/error":
                    provider_errors.append((thread_id, event))
                elif kind == NAMED and isinstance(name := event.get("threadName"), str):
                    self._named(thread_id, name)
            for thread_id, event in provider_errors:  # a read's lines went out before its notices are taken
                self.advise(bridge, thread_id, f"{event['message']}\n{event.get('detail', '')}")
            if self._fanout.tracer.enabled:  # turn spans start and end here: once per read, never per delta
                self._fanout.tracer.noticed(bridge.provider_id, noticed)
        if delivery.dropped:
            dropped, delivery.dropped = delivery.dropped, []
            self._counters.grammar_drops += len(dropped)
            for thread_id, event, violation in dropped:
                hint = mistakes.drop_hint(bridge.assembler, bridge.guard, thread_id, event, violation.rule)
                message = mistakes.drop_message(bridge.provider_id, thread_id, event, violation, hint)
                self._mistakes.note(thread_id, violation.rule, message)
                log.warning(message, threadId=thread_id, providerId=bridge.provider_id, rule=violation.rule)
        assembler = bridge.assembler
        if assembler.arrivals:  # the threads it newly heard from: members of the bridge (until a release)
            bridge.threads.update(assembler.arrivals)
            assembler.arrivals.clear()
        if assembler.suspects:
            self._take_suspects(bridge)
        if delivery.replaced:
            self._counters.unhandled_extensions += delivery.replaced
            delivery.replaced = 0
        if delivery.failed:
            failed, delivery.failed = delivery.failed, []
            self._counters.failed_notifications += len(failed)
            for thread_id, exc in failed:
                log.error(
                    "a bridge notification failed; the rest of its batch goes on",
                    providerId=bridge.provider_id,
                    threadId=thread_id,
                    method="thread/delta",
                    exc_info=exc,
                )
        if delivery.flushes:  # its coalesced text's flushes: the flusher drains them when due (none runs: dropped)
            if not self._flushing:
                delivery.drop_flushes()
            elif self._flusher_idle:
                self._flusher_idle = False
                self._flush_wake.set()

    def _named(self, thread_id: str, name: str) -> None:
        """A thread's new name, for `daemon/status`; with `--journal` also in `<thread>.names.ndjson`, which a
        restarted daemon reads back (`read_names`): the events' journal is read whole only when asked for."""
        self._registry.named(thread_id, name)
        directory = self._journal.directory
        if directory is not None:
            try:
                append_record(beside(directory, thread_id, NAMES), {"threadId": thread_id, "name": name})
            except OSError as exc:
                log.warning("could not journal a thread's name", threadId=thread_id, error=str(exc))

    def read_names(self) -> None:
        """A restart: each journaled thread's latest name, back in its record."""
        if self._journal.directory is not None:
            for record in latest_beside(self._journal.directory, NAMES):
                thread_id, name = record.get("threadId"), record.get("name")
                if isinstance(thread_id, str) and isinstance(name, str):
                    self._registry.named(thread_id, name)

    def _take_suspects(self, bridge: BridgeProcess) -> None:
        """Closes the grammar lets pass but a bridge rarely means (`Assembler.suspects`): counted, logged with the
        bridge's key, kept for `daemon/status` (`bbridge run --strict` fails on them); the events are unchanged."""
        suspects, bridge.assembler.suspects = bridge.assembler.suspects, []
        self._counters.suspect_closes += len(suspects)
        for suspect in suspects:
            message = mistakes.suspect_message(suspect)
            self._mistakes.note(suspect.thread_id, suspect.rule, message)
            log.warning(
                f"Suspect close from provider {bridge.provider_id!r} in thread {suspect.thread_id!r} "
                f"({suspect.rule}): {message}",
                threadId=suspect.thread_id,
                providerId=bridge.provider_id,
                rule=suspect.rule,
            )

    def _deliver(self, bridge: BridgeProcess, thread_id: str, events: list[Event]) -> None:
        """Events made outside a notification (a due text flush, a daemon warning), through the bridge's
        delivery and out at once."""
        now = trio.current_time()
        line = bridge.delivery.deliver(thread_id, events)
        bridge.delivery.note_pending(thread_id, now * 1000)
        self._take_notices(bridge, now)
        if line is not None:
            self._fanout.broadcast([line])

    async def flusher(self) -> None:
        """One task drains every thread's due text (a task per thread and window cost more than the text): it
        wakes `FLUSH_SLACK_S` after the first queued flush of any bridge is due and takes every flush due by then,
        in one send. Each bridge's delivery holds its queue in due order (`Delivery.flushes`: every entry waits one
        window) and drains it in one compiled call, with no Python step per entry. Coalesced text waits for traffic in the reference; here it goes out when due."""
        self._flushing = True
        try:
            while True:
                due = min((bridge.delivery.next_due() for bridge in self._bridges.values()), default=NOT_DUE)
                if due == NOT_DUE:
                    self._flusher_idle = True  # the next read that queues a flush wakes it (`_take_notices`)
                    await self._flush_wake.wait()
                    self._flush_wake = trio.Event()
                    continue
                now = trio.current_time()
                if due > now * 1000:  # compared in ms, as `flush_due` compares: the first entry is always taken next
                    await trio.sleep_until(due / 1000 + FLUSH_SLACK_S)
                    now = trio.current_time()
                now_ms = now * 1000
                lines: list[bytes] = []
                for bridge in list(self._bridges.values()):
                    delivery = bridge.delivery
                    if delivery.next_due() > now_ms:
                        continue
                    if bridge.state != "ready":
                        delivery.drop_flushes()
                        continue
                    delivery.flush_due(now_ms, lines)
                    self._take_notices(bridge, now)
                self._fanout.broadcast(lines)
                del lines  # freed now, while in the cache, not after the next sleep (`rpc.Connection._read_loop`)
        finally:
            self._flushing = False

    def advise(self, bridge: BridgeProcess, thread_id: str, text: str) -> None:
        """A `provider/error` whose text names `BB_*` variables the bridge was not given ("set BB_X …, then
        restart"): a daemon-made `system/warning` after it says how to set them through bbridge (the canonical
        error stays as the bridge made it), once per thread and names for this bridge process."""
        names = tuple(bridge.missing_env(text))
        if not names or (thread_id, names) in bridge.advised:
            return
        bridge.advised.add((thread_id, names))
        warning: Event = {"type": "system/warning", "threadId": thread_id, "scope": {"kind": "thread"}}
        warning["code"] = "bridge_env_not_passed"
        warning["message"] = env_advice(bridge.provider_id, list(names), bridge.stripped)
        warning["details"] = {"variables": list(names), "stripped": [n for n in names if n in bridge.stripped]}
        self._fanout.publish(thread_id, bridge.provider_id, [warning])

    def _on_forwarded(self, bridge: BridgeProcess, method: str, raw: msgspec.Raw | None) -> None:
        """A notification every client gets (with the bridge's `providerId`), after what the daemon learns from it
        (`FORWARDED_NOTIFICATIONS`)."""
        try:
            params = msgspec.json.decode(raw) if raw is not None else {}
        except msgspec.DecodeError:
            return
        if not isinstance(params, dict):
            return
        learn = FORWARDED_NOTIFICATIONS[method]
        if learn is not None:
            learn(self, bridge, raw)
        params["providerId"] = bridge.provider_id
        self._fanout.broadcast([rpc.encode_notification(method, params)])

    def _on_identity(self, bridge: BridgeProcess, raw: msgspec.Raw | None) -> None:
        """`thread/identity`: the thread's provider thread id, and the bridge serves it."""
        identity = decode(raw, _Identity)
        if identity is not None:
            self._registry.identify(identity.threadId, identity.providerThreadId, identity.sessionRestorable)
            bridge.serves(identity.threadId)

    def _on_replaced(self, bridge: BridgeProcess, raw: msgspec.Raw | None) -> None:
        """`session/replaced`: a warning in the thread's timeline when the provider lost its context."""
        replaced = decode(raw, _Replaced)
        if replaced is not None and replaced.providerThreadId and replaced.contextLost:
            self.deliver_warning(
                bridge,
                replaced.threadId,
                "Provider session was replaced; provider-side context was lost.",
                replaced.reason,
            )

    def _on_bridge_error(self, bridge: BridgeProcess, raw: msgspec.Raw | None) -> None:
        params = decode(raw, ThreadParams)
        message = decode(raw, _Message)
        if params is not None and message is not None and params.threadId and params.providerThreadId:
            self.deliver_warning(bridge, params.threadId, message.message, None)

    def deliver_warning(self, bridge: BridgeProcess, thread_id: str, summary: str, details: str | None) -> None:
        event: Event = {"type": "provider/warning", "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"}}
        event["category"] = "general"
        event["summary"] = summary
        if details is not None:
            event["details"] = details
        self._deliver(bridge, thread_id, [event])


# The bridge notifications forwarded to every client, each with what the daemon learns from it first (if anything).
FORWARDED_NOTIFICATIONS: dict[str, Callable[[Output, BridgeProcess, msgspec.Raw | None], None] | None] = {
    "thread/identity": Output._on_identity,
    "session/replaced": Output._on_replaced,
    "provider/recovery": None,
}


async def _let_writers_run() -> None:
    """Two checkpoints: an idle client's lines went out in `_broadcast` itself (`rpc.Connection.write_now`); a
    busy one's writer was woken, and trio runs each batch of ready tasks in random order, so after the second
    checkpoint every writer woken before the first has had its turn, and a writer sends in its first turn
    (`rpc`'s write lock is taken without a checkpoint when free).

    Then the CPU is offered to whoever those sends woke. Linux tends to wake a reader on its writer's CPU, and
    there the scheduler lets the writer run on until its time slice ends or it blocks: the client would read its
    first events only after the daemon has assembled the rest of the read. One `sched_yield` per read lets a client sharing the daemon's CPU take them now; with
    nothing else runnable it returns at once."""
    await trio.lowlevel.checkpoint()
    await trio.lowlevel.checkpoint()
    os.sched_yield()


class _Message(msgspec.Struct):
    message: str


def decode(raw: msgspec.Raw | None, kind: type[Any]) -> Any:
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None

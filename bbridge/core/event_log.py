"""The event log and the delivery into it: from assembled events to the clients' `thread/events` line, in one
compiled call per batch (daemon.md §4).

`Delivery` stamps a bridge's events with their thread (assembler.md §12), lets the extension check
replace a refused payload, drops what the grammar guard refuses (§13), and hands the rest to the
`EventLog`, which gives each event its thread's next `seq`, encodes it once as a journal entry
(`{"seq":n,"event":…}`), keeps the newest `bound` entries and frames the batch as one notification
line. Everything the daemon must still act on — lifecycle events for its watchers, dropped events for
its log — is collected on the `Delivery` for it to take after the batch. Keeping this loop in the
core puts the per-event work of the daemon's hot path into the compiled build.

Files are the journal's business (`bbridge.daemon.journal`): it opens each new thread's log through
`opener`, may load older entries into it, and sets `write` to receive every batch of new entries.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from bbridge.core import grammar as g
from bbridge.core.assembler import Assembler
from bbridge.core.events import Event, stamp
from bbridge.core.guard import Guard, Violation

_encoder: Final = msgspec.json.Encoder()
_TAIL: Final = b"]}}"
CHUNK: Final = 64  # journal entries per tuple (`ThreadLog`)
NOT_DUE: Final = 1e300  # `Delivery.next_due` with no flush queued: no clock (ms) is that late
_DELTA_PARAMS: Final = g.ThreadDeltaParams  # a static of the compiled module: `g.…` is a module lookup at each use


class ThreadLog:
    """One thread's seq counter and its newest encoded entries (seqs up to `last_seq`, contiguous, at most `bound`).

    The entries are kept in tuples of `CHUNK` (and a list of the newest, fewer than `CHUNK`): a tuple of bytes is
    untracked by the cyclic collector at the first collection that sees it, so a full collection no longer reads
    every held entry (held one by one, they made each full collection a stall of every delivery, growing with the
    threads and the bound). Up to `CHUNK - 1` dropped entries may stay in memory until their chunk goes.
    """

    def __init__(self, bound: int) -> None:
        self.last_seq = 0
        self.bound = bound
        self.held = 0  # entries held (`bound` at most)
        self.chunks: deque[tuple[bytes, ...]] | None = None  # made with the first full chunk: most threads never
        self.skip = 0  # entries of the oldest chunk already dropped
        self.tail: list[bytes] = []
        self.write: Callable[[list[bytes]], None] | None = None  # the journal file's taker of new entries
        # `{"jsonrpc":"2.0","method":"thread/events","params":{…,"events":[` for `head_provider`, once made
        self.head = b""
        self.head_provider = ""

    def first_held(self) -> int:
        """The seq of the oldest entry held in memory (`last_seq + 1` when none is)."""
        return self.last_seq - self.held + 1

    def extend(self, entries: list[bytes]) -> None:
        """Holds the entries (the next seqs, in order), dropping the oldest beyond the bound."""
        tail = self.tail
        tail.extend(entries)
        if len(tail) >= CHUNK:
            full = len(tail) - len(tail) % CHUNK
            chunks = self.chunks
            if chunks is None:
                chunks = self.chunks = deque()
            for start in range(0, full, CHUNK):
                chunks.append(tuple(tail[start : start + CHUNK]))
            del tail[:full]
        self.held += len(entries)
        excess = self.held - self.bound
        if excess > 0:
            self._drop(excess)

    def _drop(self, count: int) -> None:
        self.held -= count
        chunks = self.chunks
        while count > 0 and chunks is not None and chunks:
            left = len(chunks[0]) - self.skip
            if count < left:
                self.skip += count
                return
            chunks.popleft()
            self.skip = 0
            count -= left
        if count > 0:
            del self.tail[:count]

    def entries(self, skip: int = 0) -> list[bytes]:
        """The held entries, oldest first, from the `skip`-th on."""
        out: list[bytes] = []
        start = self.skip + skip
        for chunk in self.chunks or ():
            if start >= len(chunk):
                start -= len(chunk)
                continue
            out.extend(chunk[start:] if start else chunk)
            start = 0
        out.extend(self.tail[start:] if start else self.tail)
        return out


class EventLog:
    """Every thread's `ThreadLog`; `opener` (the journal's loader) sees each one as it is created."""

    def __init__(self, bound: int, opener: Callable[[str, ThreadLog], None] | None = None) -> None:
        if bound < 1:
            raise ValueError("journal bound must be at least 1")
        self.bound = bound
        self.opener = opener
        self.threads: dict[str, ThreadLog] = {}
        self.recorded = 0  # entries appended since start

    def thread(self, thread_id: str) -> ThreadLog:
        """The thread's log, made (and shown to the opener) on first use."""
        log = self.threads.get(thread_id)
        if log is None:
            log = self.threads[thread_id] = ThreadLog(self.bound)
            if self.opener is not None:
                self.opener(thread_id, log)
        return log

    def append(self, thread_id: str, events: list[Event]) -> list[bytes]:
        """Number and encode one batch; returns its entries."""
        return self._append(self.thread(thread_id), events)

    def _append(self, log: ThreadLog, events: list[Event]) -> list[bytes]:
        seq = log.last_seq
        encoded: list[bytes] = []
        for event in events:
            seq += 1
            encoded.append(_encoder.encode({"seq": seq, "event": event}))
        log.extend(encoded)
        log.last_seq = seq
        self.recorded += len(encoded)
        if log.write is not None and encoded:
            log.write(encoded)
        return encoded

    def record(self, thread_id: str, provider_id: str, events: list[Event]) -> bytes:
        """`append`, framed: the batch's `thread/events` notification line (no terminator)."""
        log = self.thread(thread_id)
        entries = self._append(log, events)
        head = log.head
        if not head or log.head_provider != provider_id:  # the thread's first line, or a new bridge's
            params = _encoder.encode({"threadId": thread_id, "providerId": provider_id})
            head = log.head = b'{"jsonrpc":"2.0","method":"thread/events","params":' + params[:-1] + b',"events":['
            log.head_provider = provider_id
        if len(entries) == 1:
            return head + entries[0] + _TAIL
        return b"".join((head, b",".join(entries), _TAIL))


class Delivery:
    """One bridge's path from deltas to a framed line: assemble, stamp, check, guard, record.

    `check` sees the events whose type is in `checked` and returns the event or its replacement;
    `replaced` counts the replacements. `noticed` collects the accepted events whose type is in
    `watched` and `dropped` the refused ones, each with its thread, in order, for the daemon to take.
    """

    def __init__(
        self,
        provider_id: str,
        assembler: Assembler,
        guard: Guard,
        log: EventLog,
        provider_threads: dict[str, str],
        watched: frozenset[str],
        check: Callable[[Event], Event] | None,
        checked: frozenset[str],
    ) -> None:
        self.provider_id = provider_id
        self.assembler = assembler
        self.guard = guard
        self.log = log
        self.provider_threads = provider_threads  # shared with the daemon; `thread/identity` updates it
        self.watched = watched
        self.check = check
        self.checked = checked
        self.noticed: list[tuple[str, Event]] = []
        self.dropped: list[tuple[str, Event, Violation]] = []
        self.replaced = 0
        # Coalesced text waits for a flush its window's end: `flushes` holds each holding thread's next one (due
        # time in ms, thread), in due order (every entry waits one window), `queued` the threads it holds. The
        # daemon's flusher drains what fell due (`flush_due`); kept here, a flush costs no Python loop step.
        self.queued: set[str] = set()
        self.flushes: deque[tuple[float, str]] = deque()
        self.failed: list[tuple[str, Exception]] = []  # a notification whose assembly raised: its thread and why
        self.deltas = 0  # deltas taken since start

    def take(self, thread_id: str, deltas: Sequence[g.Delta], now_ms: float) -> bytes | None:
        """One notification's deltas, assembled and delivered (under the thread id as the assembler holds it); None
        when no event passed."""
        events = self.assembler.assemble(thread_id, deltas, now_ms)
        return self.deliver(self.assembler.batch_thread, events)

    def take_notes(self, notes: Sequence[Any], start: int, stop: int, now_ms: float, lines: list[bytes]) -> int:
        """The `thread/delta` notifications of `notes[start:stop]` whose params the framing pass decoded (`decoded`,
        a connection's notifications: only a `thread/delta` line is decoded into `ThreadDeltaParams`, so the type
        alone says the method, without a generic read of `method` and a string comparison per note), each taken as
        `take_params` does, in one compiled loop over a read; returns the index of the first note it leaves to the
        caller (another method, or params not decoded), `stop` when none. A note whose assembly raises is recorded
        in `failed`; the rest go on."""
        batch: list[Any] = notes if isinstance(notes, list) else list(notes)  # indexed directly (`assemble`'s note)
        i = start
        while i < stop:
            params = batch[i].decoded
            if type(params) is not _DELTA_PARAMS:
                return i
            self.take_params(params, now_ms, lines)
            i += 1
        return stop

    def take_params(self, params: g.ThreadDeltaParams, now_ms: float, lines: list[bytes]) -> None:
        """One notification's params: its line (if any event passed) in `lines`, its thread's flush queued when it
        newly holds coalesced text. The thread's traffic is its assembler state's (`Assembler.heard_at`,
        `arrivals`): a notification with no deltas reaches no state, and is told to it (`hear`)."""
        thread_id = params.threadId
        deltas = params.deltas
        if not deltas:
            self.assembler.hear(thread_id, now_ms)
        self.deltas += len(deltas)
        try:
            line = self.take(thread_id, deltas, now_ms)
        except Exception as exc:
            self.failed.append((thread_id, exc))
            self.note_pending(thread_id, now_ms)
            return
        if line is not None:
            lines.append(line)
        if self.assembler.began_holding():  # text held since an earlier call has its flush queued already
            self.note_pending(self.assembler.batch_thread, now_ms)

    def note_pending(self, thread_id: str, now_ms: float) -> None:
        """Queues the thread's flush, a window from `now_ms`, when it holds coalesced text and none is queued."""
        if thread_id not in self.queued and self.assembler.has_pending_text(thread_id):
            self.queued.add(thread_id)
            self.flushes.append((now_ms + self.assembler.text_delta_flush_ms, thread_id))

    def next_due(self) -> float:
        """When the first queued flush falls due (ms); NOT_DUE when none is queued."""
        flushes = self.flushes
        return flushes[0][0] if flushes else NOT_DUE

    def flush_due(self, now_ms: float, lines: list[bytes]) -> None:
        """Every queued flush due by `now_ms`, in order, its line (if any) in `lines`."""
        flushes = self.flushes
        while flushes and flushes[0][0] <= now_ms:
            line = self.flush(flushes.popleft()[1], now_ms)
            if line is not None:
                lines.append(line)

    def drop_flushes(self) -> None:
        """Forget the queued flushes (the bridge is not ready, or no flusher runs): the text waits for traffic."""
        self.flushes.clear()
        self.queued.clear()

    def flush(self, thread_id: str, now_ms: float) -> bytes | None:
        """A queued flush that fell due: the thread's text whose window has elapsed, delivered. Most find none: the
        thread's next delta flushed it already (and its text held since is not due yet), so no batch is made."""
        self.queued.discard(thread_id)
        line = self.take(thread_id, [], now_ms) if self.assembler.holds_due(thread_id, now_ms) else None
        self.note_pending(thread_id, now_ms)
        return line

    def deliver(self, thread_id: str, events: list[Event]) -> bytes | None:
        """The events' `thread/events` line, or None when none passed the guard."""
        if not events:  # most deltas inside a coalescing window make none
            return None
        provider_threads = self.provider_threads
        provider_thread = provider_threads.get(thread_id)
        guard, watched, check, checked = self.guard, self.watched, self.check, self.checked
        accepted: list[Event] = []
        for event in events:
            kind: str = event["type"]
            if kind == "thread/identity":
                provider_thread = provider_threads[thread_id] = event["providerThreadId"]
            stamp(event, thread_id, provider_thread)
            if check is not None and kind in checked:
                replacement = check(event)
                if replacement is not event:
                    self.replaced += 1
                    event, kind = replacement, replacement["type"]
            violation = guard.observe(event)
            if violation is not None:
                self.dropped.append((thread_id, event, violation))
                continue
            if kind in watched:
                self.noticed.append((thread_id, event))
            accepted.append(event)
        if not accepted:
            return None
        return self.log.record(thread_id, self.provider_id, accepted)

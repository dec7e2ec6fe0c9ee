"""The delta assembler: validated `thread/delta` batches in, canonical ThreadEvents out.

Pure and synchronous (assembler.md §4–§12). The caller passes the clock into
every `assemble()` call, so the same input always yields the same output.
Events are insertion-ordered dicts with the reference's key order and an
unstamped `threadId`/`providerThreadId` (the runtime stamps them).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple, cast

import msgspec

from bbridge.core import grammar as g
from bbridge.core import items as it
from bbridge.core.events import Event, delta_event, new_event
from bbridge.core.ids import Ids
from bbridge.core.items import BACKGROUND_TASK_SHAPE, COMPACTION_SHAPE, DELEGATION_SHAPE, UNSET
from bbridge.core.outputs import Outputs
from bbridge.core.reports import Reports
from bbridge.core.sink import Sink
from bbridge.core.state import (
    MAX_MAP,
    MAX_SETTLED,
    MAX_THREADS,
    OpenItem,
    TextWindow,
    ThreadState,
    diff_cumulative_text,
    item_key,
    key_of,
    stream_key,
    trim,
)
from bbridge.core.turns import Turns

__all__ = ["Assembler", "Suspect", "diff_cumulative_text", "item_key"]

# Closes the reference ignores or allows silently, noted for the bridge author (never an event: parity holds).
CLOSES_ONCE: Final = "item/closes-once"  # a second close of one keyed item: ignored
OPENS_BEFORE_CLOSE: Final = "item/opens-before-close"  # a close for a key with no open item (a typo, a late close)
MAX_SUSPECTS: Final = 256  # kept until the caller takes them; more are not noted

_TEXT_DELTA_TYPE: Final = {
    "agentMessage": "item/agentMessage/delta",
    "reasoningSummary": "item/reasoning/summaryTextDelta",
    "reasoningText": "item/reasoning/textDelta",
    "plan": "item/plan/delta",
}
_FLUSH_BEFORE: Final = frozenset({g.ItemTextClose, g.ItemClose, g.SessionEnded})
_SESSION_RESET: Final = g.SessionReset
_TEXT_DELTA: Final = g.ItemTextDelta
# A msgspec Struct's attribute read from compiled code is a generic lookup; `astuple` reads all
# of a Struct's fields in one call, and a tuple's item is a compiled index. The text handler reads its delta's and key's
# fields so, by position: these are the positions it assumes (checked at import, so a reordered Struct fails loudly).
_TEXT_DELTA_FIELDS: Final = ("key", "channel", "text", "providerTurnId", "noTurnFallback")
_KEY_FIELDS: Final = ("providerItemId", "channel", "parentRef")
if g.ItemTextDelta.__struct_fields__ != _TEXT_DELTA_FIELDS or g.ItemKey.__struct_fields__ != _KEY_FIELDS:
    raise ImportError("the text handler reads ItemTextDelta and ItemKey by field position: update assembler.py")
_astuple: Final[Callable[[Any], tuple[Any, ...]]] = msgspec.structs.astuple


def _thread_attached(shape: g.Shape) -> bool:
    t = type(shape)
    return t is BACKGROUND_TASK_SHAPE or (t is DELEGATION_SHAPE and shape.background is True)  # type: ignore[attr-defined]


class Suspect(NamedTuple):
    """A close that is likely a bridge bug although the grammar allows it: the thread, the rule, the close."""

    thread_id: str
    rule: str
    delta: g.ItemClose | g.ItemTextClose


class Assembler:
    """One per bridge process; many threads share its id counters.

    Built from three collaborators, each with its own state: the `Sink`
    (batch context, coalescing, throttling), the `Ids` minter (counters never
    reset) and `Turns` (lifecycle over the thread state). The item handlers
    live here, but for an item's output (`Outputs`); the turn handlers and the
    session's end live in `Turns`, the handlers of the deltas that report on
    the thread (usage, context, metadata, errors) in `Reports`.
    """

    def __init__(
        self,
        provider_id: str,
        entropy_prefix: str | None = None,
        progress_throttle_ms: float = 500,
        text_delta_flush_ms: float = 100,
        evict_at_birth: bool = True,
    ) -> None:
        entropy = entropy_prefix if entropy_prefix is not None else "da" + str(uuid.uuid4())[:8]
        self.provider_id = provider_id
        self._sink = sink = Sink(progress_throttle_ms, text_delta_flush_ms)
        self._ids = ids = Ids(entropy)
        # Handlers call the collaborators' methods directly (`self._sink.push(...)`): in the compiled core
        # that is a native call, where a bound method stored on the instance is a generic Python call.
        self._turns = turns = Turns(provider_id, sink, ids)
        self._reports = Reports(sink, ids, turns)
        self._outputs = Outputs(sink, ids, turns)
        self._states: dict[str, ThreadState] = {}
        self._uses = 0  # `_state` calls so far: a state's `used` is the count when it was last served
        # The reference's prune may evict the state it has just made when every other one is pinned (§19.5): the
        # parity tooling keeps that; the daemon passes False, so a bridge with more than MAX_THREADS threads at work
        # keeps each one's state (pinned states are bounded by the work in flight, idle ones still by MAX_THREADS).
        self._evict_at_birth = evict_at_birth
        # the thread of the last `assemble` call (for `suspects`), as its state holds it (`ThreadState.thread_id`)
        self.batch_thread = ""
        self.suspects: list[Suspect] = []  # taken (and emptied) by whoever reports them
        # the threads a notification reached since the owner last took this list, each once until it `depart`s
        self.arrivals: list[str] = []

    # -- public surface ------------------------------------------------------

    def assemble(self, thread_id: str, deltas: Sequence[g.Delta], now: float = 0) -> list[Event]:
        """Events of one validated notification; `now` is the clock (ms) for the whole call."""
        # a list (as decoded): compiled code indexes and iterates it directly, not through the generic protocols
        batch: list[g.Delta] = deltas if isinstance(deltas, list) else list(deltas)
        out: list[Event] = []
        sink = self._sink
        sink.now, sink.out, sink.began = now, out, False
        states = self._states
        pre = None if batch and type(batch[0]) is _SESSION_RESET else states.get(thread_id)
        if pre is not None:
            thread_id = pre.thread_id
        self.batch_thread = thread_id
        sink.state = pre
        if pre is not None:
            sink.flush_elapsed_text(pre)  # nothing, unless held text is due (`pending_since`: no look at the list)
            if pre.pending_progress:
                skip = {item_key(d.key) for d in batch if type(d) is g.ItemProgress}
                sink.flush_elapsed_progress(pre, skip)
        handlers = _HANDLERS
        s: ThreadState | None = None  # looked up (and made newest) once per batch, again after a reset
        for delta in batch:
            kind = type(delta)
            if kind is _SESSION_RESET:
                gone = states.pop(thread_id, None)
                if gone is not None and gone.holds_text():
                    sink.flush_all_text(gone)
                s = pre = None
                continue
            if kind is not _TEXT_DELTA and kind in _FLUSH_BEFORE:  # most deltas: no set lookup (a type's hash)
                held = s if s is not None else states.get(thread_id)
                if held is not None and held.holds_text():
                    sink.flush_all_text(held)
            target = s
            if target is None:
                target = self._state(thread_id, pre)
                if sink.state is target:  # kept for the batch, unless pruning evicted it at once (then: per delta)
                    s = target
            if kind is _TEXT_DELTA:  # the most frequent delta: a direct call (native in the compiled core)
                self._text_delta(target, cast(g.ItemTextDelta, delta))
            else:
                handlers[kind](self, target, delta)
        return out  # the sink keeps it until the next batch: only handlers push, inside this call (no list made for it)

    def get_bb_item_id(self, thread_id: str, provider_item_id: str) -> str | None:
        s = self._states.get(thread_id)
        return None if s is None else s.item_by_pid.get(provider_item_id)

    def get_provider_item_id(self, thread_id: str, bb_item_id: str) -> str | None:
        s = self._states.get(thread_id)
        return None if s is None else s.pid_by_item.get(bb_item_id)

    def get_bb_turn_id(self, thread_id: str, provider_turn_id: str) -> str | None:
        s = self._states.get(thread_id)
        return None if s is None else s.turn_by_ptid.get(provider_turn_id)

    def get_provider_turn_id(self, thread_id: str, bb_turn_id: str) -> str | None:
        s = self._states.get(thread_id)
        return None if s is None else s.ptid_by_turn.get(bb_turn_id)

    def get_open_turn_id(self, thread_id: str) -> str | None:
        s = self._states.get(thread_id)
        return None if s is None else s.current_turn

    def has_pending_text(self, thread_id: str) -> bool:
        """Coalesced text waits for traffic; a live host flushes it with an empty batch when due."""
        s = self._states.get(thread_id)
        return s is not None and s.holds_text()

    def holds_due(self, thread_id: str, now: float) -> bool:
        """Whether `assemble(thread_id, [], now)` may make events: held text whose window has elapsed, or held
        progress (whose throttle that call checks). When False, that call would make none and change nothing."""
        s = self._states.get(thread_id)
        if s is None:
            return False
        if s.pending_progress:
            return True
        return s.text_due(now, self._sink.text_delta_flush_ms)

    @property
    def text_delta_flush_ms(self) -> float:
        """The coalescing window (ms): held text is due this long after its window began."""
        return self._sink.text_delta_flush_ms

    def began_holding(self) -> bool:
        """Whether the last `assemble` call's thread began to hold coalesced text (it may hold none by its end)."""
        return self._sink.began

    def pending_input_count(self, thread_id: str) -> int:
        s = self._states.get(thread_id)
        return 0 if s is None else len(s.pending_accepted)

    def streamed_text(self, thread_id: str) -> dict[str, tuple[str, str]]:
        """Text (main, summary) streamed so far into each open item, by bb item id."""
        s = self._states.get(thread_id)
        if s is None:
            return {}
        return {
            rec.bb_id: (rec.text, rec.summary_text) for rec in s.open_items.values() if rec.text or rec.summary_text
        }

    def forget_thread(self, thread_id: str) -> None:
        """Drop a released thread's state (its ids stay unique: counters never reset)."""
        self._states.pop(thread_id, None)

    def thread_count(self) -> int:
        return len(self._states)

    # -- state and ids -------------------------------------------------------

    def _state(self, thread_id: str, known: ThreadState | None = None) -> ThreadState:
        """The thread's state (`known` when the caller has just found it), made newest in LRU order and set as the
        sink's batch state."""
        states = self._states
        self._uses += 1
        sink = self._sink
        s = known if known is not None else states.get(thread_id)
        if s is not None:
            s.used = self._uses  # recency as a count: moving the key to the dict's end cost a delete and an insert
            self._hear(s, sink.now)
            sink.state = s
            return s
        s = states[thread_id] = ThreadState(thread_id)
        s.used = self._uses
        self._hear(s, sink.now)
        sink.state = s
        if len(states) > MAX_THREADS:
            self._prune("" if self._evict_at_birth else thread_id)
            if thread_id not in states:  # pruning evicted this brand-new state: its events pass uncoalesced
                self._sink.state = None
        return s

    def _hear(self, s: ThreadState, now: float) -> None:
        """A notification reached the thread's state: its traffic time, and its arrival if the owner has not had it."""
        s.heard = now
        if not s.arrived:
            s.arrived = True
            self.arrivals.append(s.thread_id)

    def hear(self, thread_id: str, now: float) -> None:
        """A notification with no deltas: the thread's traffic all the same (`heard_at`), if it has a state."""
        s = self._states.get(thread_id)
        if s is not None:
            self._hear(s, now)

    def heard_at(self, thread_id: str) -> float | None:
        """The clock (ms) of the thread's latest notification with deltas (or `hear`d); None without a state."""
        s = self._states.get(thread_id)
        return None if s is None else s.heard

    def depart(self, thread_id: str) -> None:
        """The owner let the thread go: its next notification makes it one of the `arrivals` again."""
        s = self._states.get(thread_id)
        if s is not None:
            s.arrived = False

    def _prune(self, keep: str) -> None:
        """Evicts least recently used states that are not pinned (nor `keep`) down to the bound."""
        states = self._states
        while len(states) > MAX_THREADS:
            unpinned = [(st.used, tid) for tid, st in states.items() if tid != keep and not st.pinned()]
            if not unpinned:
                return
            del states[min(unpinned)[1]]

    # -- items ---------------------------------------------------------------

    def _item_open(self, s: ThreadState, d: g.ItemOpen) -> None:
        key = d.key
        if d.providerTurnId is not UNSET:
            turn: str | None = self._ids.vouch(s, d.providerTurnId)
        elif d.attach == "currentOrLast":
            turn = s.current_turn if s.current_turn is not None else s.last_turn
        else:
            turn = s.current_turn
        if turn is None:
            self._turns.fallback(s, d.noTurnFallback, key.parentRef)
            return
        k = item_key(key)
        s.settled_keys.pop(k, None)
        shape = d.item
        if type(shape) is not COMPACTION_SHAPE and s.open_items:
            parent_ref = key.parentRef
            released = [
                ok
                for ok, rec in s.open_items.items()
                if rec.key.providerItemId is UNSET
                and rec.item["type"] == "agentMessage"
                and rec.key.parentRef == parent_ref
            ]
            for ok in released:
                s.drop_item(ok)
        bb = self._ids.known_or_mint(s, key.providerItemId)
        item = it.open_item(bb, shape, self._ids.parent(s, key.parentRef), d.presentation)
        s.put_item(k, OpenItem(bb, key, item, _thread_attached(shape)))
        s.progress_last_emit[k] = self._sink.now
        trim(s.progress_last_emit, MAX_MAP)
        event = new_event("item/started", turn)
        event["item"] = item
        self._sink.push(event)

    def _item_close(self, s: ThreadState, d: g.ItemClose) -> None:
        key, shape = d.key, d.item
        attached = _thread_attached(shape)
        turn = None if attached else self._turns.turn_for(s, d.providerTurnId)
        if turn is None and not attached:
            self._turns.fallback(s, d.noTurnFallback, key.parentRef)
            return
        k = item_key(key)
        pid = key.providerItemId
        if pid is not UNSET and k in s.settled_keys:
            self._suspect(CLOSES_ONCE, d)
            return
        rec = s.open_items.get(k)
        if rec is None and pid is not UNSET:
            self._suspect(OPENS_BEFORE_CLOSE, d)
        parent = self._ids.parent(s, key.parentRef)
        opened = rec.item if rec is not None else None
        summary = opened.get("summary", UNSET) if opened is not None and opened["type"] == "delegation" else UNSET
        if opened is not None and turn is not None and not it.shape_matches(shape, opened):
            echoed = it.echo_item(opened, d.status, d, parent)
            if "presentation" in opened:
                echoed["presentation"] = opened["presentation"]
            event = new_event("item/completed", turn)
            event["item"] = echoed
            self._sink.push(event)
        if rec is not None:
            bb = rec.bb_id
            if pid is not UNSET:
                self._ids.register(s, pid, bb)
        else:
            bb = self._ids.known_or_mint(s, pid)
        pres = d.presentation
        if pres is UNSET and opened is not None:
            pres = opened.get("presentation", UNSET)
        if parent is None and opened is not None:
            parent = opened.get("parentToolCallId")
        final = it.close_item(bb, shape, d, summary, parent, pres)
        s.drop_item(k)
        s.cmd_snapshots.pop(k, None)
        s.pending_progress.pop(k, None)
        s.progress_last_emit.pop(k, None)
        if pid is not UNSET:
            s.settled_keys[k] = None
            trim(s.settled_keys, MAX_SETTLED)
        if final["type"] == "backgroundTask":
            event = new_event("item/backgroundTask/completed", None)
        elif final["type"] == "delegation" and final["background"]:
            event = new_event("item/delegation/completed", None)
        else:
            event = new_event("item/completed", turn)
        event["item"] = final
        self._sink.push(event)

    def _suspect(self, rule: str, d: g.ItemClose | g.ItemTextClose) -> None:
        if len(self.suspects) < MAX_SUSPECTS:
            self.suspects.append(Suspect(self.batch_thread, rule, d))

    def _item_progress(self, s: ThreadState, d: g.ItemProgress) -> None:
        key = d.key
        k = item_key(key)
        rec = s.open_items.get(k)
        pid = key.providerItemId
        if rec is not None:
            bb = rec.bb_id
        elif pid is not UNSET:
            bb = s.item_by_pid.get(pid, pid)
        else:
            bb = self._ids.item()
        parent = self._ids.parent(s, key.parentRef)
        snap = d.snapshot
        if type(snap) is DELEGATION_SHAPE:
            opened = rec.item if rec is not None else None
            if parent is None and opened is not None:
                parent = opened.get("parentToolCallId")
            summary: Any = snap.summary
            if summary is UNSET and opened is not None and opened["type"] == "delegation":
                summary = opened.get("summary", UNSET)
            pres = opened.get("presentation", UNSET) if opened is not None else UNSET
            event = new_event("item/delegation/progress", None)
            event["item"] = it.delegation_item(bb, snap, "pending", summary, parent, pres)
        elif type(snap) is BACKGROUND_TASK_SHAPE:
            event = new_event("item/backgroundTask/progress", None)
            event["item"] = it.task_item(bb, snap, parent)
        else:
            turn = self._turns.turn_for(s, d.providerTurnId)
            if turn is None:
                self._turns.fallback(s, d.noTurnFallback, key.parentRef)
                return
            event = new_event("item/toolCall/progress", turn)
            event["itemId"] = bb
            if d.message is not UNSET:
                event["message"] = d.message
            if parent:
                event["parentToolCallId"] = parent
        self._sink.throttle(s, k, event, snap is UNSET, d.flush)

    def _text_delta(self, s: ThreadState, d: g.ItemTextDelta) -> None:
        # the most frequent delta: `_turn_for` inlined, the fields read as two tuples (`_TEXT_DELTA_FIELDS`),
        # `_parent` only called for a parentRef
        fields = _astuple(d)
        key = cast(g.ItemKey, fields[0])
        ptid = cast("str | msgspec.UnsetType", fields[3])
        turn = s.current_turn if ptid is UNSET else self._ids.vouch(s, ptid)
        parts = _astuple(key)
        pid = cast("str | msgspec.UnsetType", parts[0])
        parent_ref = cast("str | msgspec.UnsetType", parts[2])
        if turn is None:
            self._turns.fallback(s, d.noTurnFallback, parent_ref)
            return
        key_channel = cast("str | msgspec.UnsetType", parts[1])
        if type(pid) is str and key_channel is UNSET and parent_ref is UNSET:  # the common key: the item id alone
            if pid == s.text_pid:  # the item of the thread's last such delta: its key (made and hashed once), its item
                k = s.text_key
                rec = s.text_rec
                if rec is None:
                    rec = s.text_rec = s.open_items.get(k)
            else:
                k = s.text_key = key_of(pid, key_channel, parent_ref)
                s.text_pid = pid
                rec = s.text_rec = s.open_items.get(k)
        else:
            k = key_of(pid, key_channel, parent_ref)
            rec = s.open_items.get(k)
        parent = None if parent_ref is UNSET else self._ids.parent(s, parent_ref)
        channel = cast(str, fields[1])
        text = cast(str, fields[2])
        if rec is not None:
            bb = rec.bb_id
        else:
            known = None if pid is UNSET else s.item_by_pid.get(pid)
            if known is not None:
                bb = known
            else:
                bb = self._ids.item()
                if pid is not UNSET:
                    self._ids.register(s, pid, bb)
                item = it.synthesized_text_item(bb, channel, parent)
                rec = OpenItem(bb, key, item, False)
                s.put_item(k, rec)
                started = new_event("item/started", turn)
                started["item"] = item
                self._sink.push(started)
        summary = channel == "reasoningSummary"
        kind = _TEXT_DELTA_TYPE[channel]
        sink = self._sink
        window: TextWindow | None = None
        if sink.coalesces(s):
            window = rec.window_of(kind, s.windows) if rec is not None else s.windows.get(stream_key(kind, bb))
        if rec is not None:
            if window is None or summary:
                rec.stream(text, summary)
            elif rec.deferred is not window:  # the main text's pieces stay in the window until it flushes
                rec.defer(window)
        if window is not None and sink.absorb_text(s, window, text):  # it holds text already: this joins it
            return
        event = delta_event(kind, turn, bb, text)
        if parent:
            event["parentToolCallId"] = parent
        if window is not None:  # the window holds nothing yet: this event is held, to become the merged one
            sink.hold(s, window, event)
        else:
            sink.push(event)

    def _text_close(self, s: ThreadState, d: g.ItemTextClose) -> None:
        key = d.key
        turn = self._turns.turn_for(s, d.providerTurnId)
        if turn is None:
            self._turns.fallback(s, d.noTurnFallback, key.parentRef)
            return
        k = item_key(key)
        pid = key.providerItemId
        if pid is not UNSET and k in s.settled_keys:
            self._suspect(CLOSES_ONCE, d)
            return
        rec = s.drop_item(k)
        if rec is None and pid is not UNSET:
            self._suspect(OPENS_BEFORE_CLOSE, d)
        summary_channel = d.channel == "reasoningSummary"
        given = None if d.text is UNSET else d.text
        if given is not None:
            final: str | None = given
        elif rec is not None:
            final = rec.summary_text if summary_channel else rec.text
        else:
            final = None
        if not final or (given is None and it.is_js_blank(final)):
            return
        parent = self._ids.parent(s, key.parentRef)
        item = None
        if rec is not None:
            if summary_channel:
                main, summary = rec.text, (given if given is not None else rec.summary_text)
            else:
                main, summary = (given if given is not None else rec.text), rec.summary_text
            item = it.text_item(rec.item, main, summary)
            bb = rec.bb_id
        if item is None:
            if rec is None:
                bb = self._ids.item() if pid is UNSET else s.item_by_pid.get(pid) or self._ids.item()
            elif parent is None:
                parent = rec.item.get("parentToolCallId")
            item = it.bare_text_item(bb, d.channel, final, parent)
        if pid is not UNSET:
            self._ids.register(s, pid, bb)
            s.settled_keys[k] = None
            trim(s.settled_keys, MAX_SETTLED)
        event = new_event("item/completed", turn)
        event["item"] = item
        self._sink.push(event)


_Handler = Callable[[Assembler, ThreadState, Any], None]


def _via_turns(handler: Callable[[Turns, ThreadState, Any], None]) -> _Handler:
    """Turn deltas are handled by the assembler's `Turns`."""
    return lambda asm, s, d: handler(asm._turns, s, d)


def _via_reports(handler: Callable[[Reports, ThreadState, Any], None]) -> _Handler:
    """Deltas that report on the thread are handled by the assembler's `Reports`."""
    return lambda asm, s, d: handler(asm._reports, s, d)


def _via_outputs(handler: Callable[[Outputs, ThreadState, Any], None]) -> _Handler:
    """An item's output deltas are handled by the assembler's `Outputs`."""
    return lambda asm, s, d: handler(asm._outputs, s, d)


# One table for every assembler: plain functions, so an assembler holds no cycle through bound methods
# and is freed by reference counting alone.
_HANDLERS: Final[dict[type, _Handler]] = {
    g.InputAccepted: _via_turns(Turns.input_accepted),
    g.TurnOpen: _via_turns(Turns.turn_open),
    g.TurnBoundary: _via_turns(Turns.turn_boundary),
    g.ItemOpen: Assembler._item_open,
    g.ItemClose: Assembler._item_close,
    g.ItemProgress: Assembler._item_progress,
    g.ItemTextDelta: Assembler._text_delta,
    g.ItemTextClose: Assembler._text_close,
    g.ItemOutputDelta: _via_outputs(Outputs.output_delta),
    g.CommandOutputSnapshot: _via_outputs(Outputs.output_snapshot),
    g.Usage: _via_reports(Reports.usage),
    g.ContextWindow: _via_reports(Reports.context_window),
    g.ContextCompacted: _via_reports(Reports.context_compacted),
    g.ContextCleared: _via_reports(Reports.context_cleared),
    g.TurnDiff: _via_reports(Reports.turn_diff),
    g.ThreadStarted: _via_reports(Reports.thread_started),
    g.ThreadIdentity: _via_reports(Reports.thread_identity),
    g.ThreadName: _via_reports(Reports.thread_name),
    g.ExtensionState: _via_reports(Reports.extension_state),
    g.ProviderRateLimits: _via_reports(Reports.rate_limits),
    g.ProviderError: _via_reports(Reports.provider_error),
    g.ProviderModelFallback: _via_reports(Reports.model_fallback),
    g.ProviderWarning: _via_reports(Reports.warning),
    g.Unhandled: _via_reports(Reports.unhandled),
    g.SessionEnded: _via_turns(Turns.session_ended),
}

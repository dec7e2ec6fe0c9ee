"""Emission with text coalescing and progress throttling (assembler.md §9, §10).

Handlers never append to the output directly: they `push` through this sink,
which buffers streamed text per stream key inside the window and keeps the
newest suppressed progress per item key. Text events are the only ones ever
merged; every other event is a barrier that flushes buffered text first.
"""

from __future__ import annotations

from bbridge.core.events import TEXT_EVENT_TYPES, Event
from bbridge.core.state import MAX_MAP, NOT_HOLDING, TextWindow, ThreadState, stream_key, trim, trim_windows


class Sink:
    """The coalescing-aware emitter the assembler's handlers write through.

    `now`, `out` and `state` are the batch context the assembler sets inside
    each `assemble()` call: the clock, the events list being built, and the
    state of the thread being assembled (None while it has none, when pushes
    pass straight through).
    """

    def __init__(self, progress_throttle_ms: float, text_delta_flush_ms: float) -> None:
        self.progress_throttle_ms = progress_throttle_ms
        self.text_delta_flush_ms = text_delta_flush_ms
        self.now: float = 0.0
        self.out: list[Event] = []
        self.state: ThreadState | None = None
        self.began = False  # whether the batch's thread began to hold text (set by `_buffer`, reset per batch)

    def push(self, event: Event) -> None:
        s = self.state
        if s is not None:
            if self.text_delta_flush_ms > 0 and event["type"] in TEXT_EVENT_TYPES:
                self._buffer(s, event)
                return
            if s.holds_text():
                self.flush_all_text(s)
        self.out.append(event)

    def flush_all_text(self, s: ThreadState) -> None:
        now = self.now
        out = self.out
        for window in s.pending_text:
            first = window.first
            assert first is not None  # a window in `pending_text` holds text
            joined = first["delta"] = "".join(window.texts)  # the held event is the sink's alone: it becomes the merge
            deferring = window.deferring
            if deferring is not None:
                deferring.commit(joined)
            out.append(first)
            window.last = now
            window.first = None
            window.texts.clear()
        s.pending_text.clear()
        s.pending_since = NOT_HOLDING

    def flush_elapsed_text(self, s: ThreadState) -> None:
        """Every held text, when some of it is due (`ThreadState.text_due`)."""
        if s.text_due(self.now, self.text_delta_flush_ms):
            self.flush_all_text(s)

    def coalesces(self, s: ThreadState) -> bool:
        """Whether text pushed for `s` now is held in a coalescing window (the batch's own thread, a window set)."""
        return self.state is s and self.text_delta_flush_ms > 0

    def absorb_text(self, s: ThreadState, window: TextWindow | None, text: str) -> bool:
        """A text delta's text added to its stream's held text, when `window` (the stream's, or None before its
        first event) already holds text: all `_buffer` would take of its event, so the caller need not make one.
        False when it did not. The caller has checked that the sink `coalesces` for `s`."""
        if window is None or window.first is None:
            return False
        window.texts.append(text)
        last = window.last
        if last is not None and self.now - last >= self.text_delta_flush_ms:
            self.flush_all_text(s)
        return True

    def _buffer(self, s: ThreadState, event: Event) -> None:
        stream = stream_key(event["type"], event["itemId"])
        windows = s.windows
        window = windows.get(stream)
        if window is None or event.get("reset") is True:
            if s.holds_text():
                self.flush_all_text(s)
            self.out.append(event)
            if window is None:
                windows[stream] = TextWindow(self.now)
                trim_windows(windows, MAX_MAP)  # nothing is held now: no window trimmed out holds text
            else:
                window.last = self.now
            return
        if not self.absorb_text(s, window, event["delta"]):
            self.hold(s, window, event)

    def hold(self, s: ThreadState, window: TextWindow, event: Event) -> None:
        """A text event held in its stream's `window` (one of `s.windows`, holding nothing yet): the merged event of
        the window's text at its flush. The text handler calls it directly once it has found the window."""
        last = window.last
        assert last is not None  # a window in `windows` is not trimmed out
        if not s.holds_text():
            s.pending_since = last
            self.began = True
        elif last < s.pending_since:
            s.pending_since = last
        window.first = event
        window.texts.append(event["delta"])
        s.pending_text.append(window)
        if self.now - last >= self.text_delta_flush_ms:
            self.flush_all_text(s)

    # -- progress throttling -------------------------------------------------

    def throttle(self, s: ThreadState, key: str, event: Event, turn_scoped: bool, flush: object) -> None:
        last = s.progress_last_emit.get(key)
        if flush is not True and last is not None and self.now - last < self.progress_throttle_ms:
            s.pending_progress[key] = (event, turn_scoped)
            return
        s.pending_progress.pop(key, None)
        s.progress_last_emit[key] = self.now
        trim(s.progress_last_emit, MAX_MAP)
        self.push(event)

    def flush_elapsed_progress(self, s: ThreadState, skip: set[str]) -> None:
        now = self.now
        for key, (event, _) in list(s.pending_progress.items()):
            if key in skip:
                continue
            last = s.progress_last_emit.get(key)
            if last is not None and now - last < self.progress_throttle_ms:
                continue
            del s.pending_progress[key]
            s.progress_last_emit[key] = now
            trim(s.progress_last_emit, MAX_MAP)
            self.push(event)

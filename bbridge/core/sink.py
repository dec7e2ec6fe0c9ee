"""Emission with text coalescing and progress throttling (assembler.md §9, §10).

Handlers never append to the output directly: they `push` through this sink,
which buffers streamed text per stream key inside the window and keeps the
newest suppressed progress per item key. Text events are the only ones ever
merged; every other event is a barrier that flushes buffered text first.
"""

from __future__ import annotations

from bbridge.core.events import TEXT_EVENT_TYPES, Event
from bbridge.core.state import MAX_MAP, ThreadState, stream_key, trim


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

    def push(self, event: Event) -> None:
        s = self.state
        if s is not None:
            if self.text_delta_flush_ms > 0 and event["type"] in TEXT_EVENT_TYPES:
                self._buffer(s, event)
                return
            if s.pending_text:
                self.flush_all_text(s)
        self.out.append(event)

    def flush_all_text(self, s: ThreadState) -> None:
        now = self.now
        last_emit = s.text_last_emit
        for stream, (first, texts) in s.pending_text.items():
            first["delta"] = "".join(texts)  # the held event is the sink's alone: it becomes the merged one
            self.out.append(first)
            last_emit[stream] = now
        s.pending_text.clear()
        trim(last_emit, MAX_MAP)

    def flush_elapsed_text(self, s: ThreadState) -> None:
        now = self.now
        for stream in s.pending_text:
            last = s.text_last_emit.get(stream)
            if last is None or now - last >= self.text_delta_flush_ms:
                self.flush_all_text(s)
                return

    def coalesces(self, s: ThreadState) -> bool:
        """Whether text pushed for `s` now is held in a coalescing window (the batch's own thread, a window set)."""
        return self.state is s and self.text_delta_flush_ms > 0

    def absorb_text(self, s: ThreadState, stream: str, text: str) -> bool:
        """A text delta's text added to its stream's pending text, when text is already pending there inside the
        window: all `_buffer` would take of its event, so the caller need not make one. False when it was not.
        The caller has checked that the sink `coalesces` for `s`."""
        pending = s.pending_text.get(stream)
        last = s.text_last_emit.get(stream)
        if pending is None or last is None:
            return False
        pending[1].append(text)
        if self.now - last >= self.text_delta_flush_ms:
            self.flush_all_text(s)
        return True

    def _buffer(self, s: ThreadState, event: Event) -> None:
        stream = stream_key(event["type"], event["itemId"])
        last = s.text_last_emit.get(stream)
        if last is None or event.get("reset") is True:
            if s.pending_text:
                self.flush_all_text(s)
            self.out.append(event)
            s.text_last_emit[stream] = self.now
            trim(s.text_last_emit, MAX_MAP)
            return
        pending = s.pending_text.get(stream)
        if pending is None:
            s.pending_text[stream] = (event, [event["delta"]])
        else:
            pending[1].append(event["delta"])
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

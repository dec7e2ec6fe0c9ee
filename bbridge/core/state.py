"""Per-thread assembler state and its bounds (assembler.md §4)."""

from __future__ import annotations

from typing import Any, Final

from msgspec import UnsetType

from bbridge.core import grammar as g
from bbridge.core import items as it
from bbridge.core.events import Event
from bbridge.core.items import UNSET

MAX_THREADS: Final = 256
MAX_MAP: Final = 1024
MAX_SETTLED: Final = 512
# `ThreadState.pending_since` while no window holds text: no clock (ms) is that late, so nothing is ever due then. A
# literal: the compiled core inlines it (a `float("inf")` was a module attribute looked up at each use).
NOT_HOLDING: Final = 1e300


def trim(mapping: dict[Any, Any], bound: int) -> None:
    while len(mapping) > bound:
        del mapping[next(iter(mapping))]


def item_key(key: g.ItemKey) -> str:
    """K(key): the three key parts joined by U+001F, absent parts empty (`UNSET` is falsy)."""
    return key_of(key.providerItemId, key.channel, key.parentRef)


def key_of(pid: str | UnsetType, channel: str | UnsetType, parent_ref: str | UnsetType) -> str:
    """`item_key` of parts a handler has already read (from compiled code each Struct attribute read is a generic
    lookup: the text handler reads two of the three anyway). The common key, an item id alone, is one concatenation
    (an f-string would test each part's truth, UNSET's through a slot call)."""
    if channel is UNSET and parent_ref is UNSET and type(pid) is str:
        return pid + "\x1f\x1f"
    return f"{pid or ''}\x1f{channel or ''}\x1f{parent_ref or ''}"


def diff_cumulative_text(next_text: str, previous_text: str | None = None) -> tuple[str, str, bool] | None:
    """(delta, next_text, reset) turning a cumulative snapshot into an append, or None."""
    prev = previous_text or ""
    if not next_text or next_text == prev:
        return None
    if not prev:
        return next_text, next_text, False
    if next_text.startswith(prev):
        return next_text[len(prev) :], next_text, False
    return next_text, next_text, True


STREAMED_CHUNK: Final = 256  # streamed pieces joined into one string at a time


class StreamedText:
    """Text streamed piece by piece, kept so that appending stays linear however long the text grows.

    `+=` on a string held by an object copies the whole text each time (quadratic in the deltas); pieces instead
    gather in `tail`, every `STREAMED_CHUNK` of them become one chunk, and the text is joined only when read (then
    kept joined).
    """

    __slots__ = ("chunks", "tail")

    def __init__(self) -> None:
        self.tail: list[str] = []  # first: what each piece reaches (see `ThreadState.__init__`)
        self.chunks: list[str] = []

    def add(self, piece: str) -> None:
        tail = self.tail
        tail.append(piece)
        if len(tail) >= STREAMED_CHUNK:
            self.chunks.append("".join(tail))
            tail.clear()

    def value(self) -> str:
        chunks = self.chunks
        if self.tail:
            chunks.append("".join(self.tail))
            self.tail.clear()
        if len(chunks) > 1:
            joined = "".join(chunks)
            chunks.clear()
            chunks.append(joined)
        return chunks[0] if chunks else ""


def stream_key(kind: str, item_id: str) -> str:
    """The sink's key of one text stream: the text event's type and its item."""
    return kind + "\x1f" + item_id


class TextWindow:
    """One text stream's coalescing window (assembler.md §9): when the stream last emitted, and what it holds.

    A thread's windows live in `ThreadState.windows` by `stream_key`; an open item keeps the one its text goes to
    (`OpenItem.window`), so a delta inside the window touches this object and its item, not the thread's maps.
    """

    __slots__ = ("deferring", "first", "last", "texts")

    def __init__(self, last: float) -> None:
        self.last: float | None = last  # None once trimmed out of the thread's windows (then no holder may use it)
        self.first: Event | None = None  # the first held event while the window holds text: it becomes the merge
        self.texts: list[str] = []  # the texts held, that event's first
        self.deferring: OpenItem | None = None  # the item whose main text some of them are (`OpenItem.defer`)


def trim_windows(windows: dict[str, TextWindow], bound: int) -> None:
    """`trim` for the windows: a window trimmed out is marked, so an item that kept it looks it up again."""
    while len(windows) > bound:
        oldest = next(iter(windows))
        windows.pop(oldest).last = None


class OpenItem(StreamedText):
    """An open item: its ids, its canonical dict, and the text streamed into it (the main text is the item's own
    `StreamedText`, one object fewer to reach per delta; the reasoning summary, rarer, has its own)."""

    __slots__ = (
        "bb_id",
        "deferred",
        "deferred_from",
        "item",
        "key",
        "stream_keys",
        "streamed_summary",
        "thread_attached",
        "window",
        "window_kind",
    )  # fmt: skip

    def __init__(self, bb_id: str, key: g.ItemKey, item: it.Item, thread_attached: bool) -> None:
        super().__init__()
        # what a text delta reads first, beside the inherited `tail` (see `ThreadState.__init__`)
        self.window: TextWindow | None = None  # the window of the item's last text delta, of type `window_kind`
        self.window_kind = ""
        self.deferred: TextWindow | None = None  # the window holding pieces of the main text not added yet (`defer`)
        self.deferred_from = 0  # where in its texts they begin
        self.bb_id = bb_id
        self.key = key
        self.item = item
        self.thread_attached = thread_attached
        self.streamed_summary: StreamedText | None = None  # made by the first piece: most items stream none
        self.stream_keys: dict[str, str] | None = None  # event type -> `stream_key`, made once per stream

    def stream_key(self, kind: str) -> str:
        """This item's `stream_key` for `kind`, the same string each time (its hash is kept: a key made anew at
        each delta was a new string to hash, twice, in the coalescing window's lookups)."""
        keys = self.stream_keys
        if keys is None:
            keys = self.stream_keys = {}
        key = keys.get(kind)
        if key is None:
            key = keys[kind] = stream_key(kind, self.bb_id)
        return key

    def window_of(self, kind: str, windows: dict[str, TextWindow]) -> TextWindow | None:
        """The thread's window of this item's `kind` stream (None before the stream's first event): the one kept
        from the last delta when it is of the same kind and still the thread's, else looked up (and kept)."""
        window = self.window
        if window is not None and self.window_kind is kind and window.last is not None:
            return window
        window = windows.get(self.stream_key(kind))
        if window is not None:
            self.window, self.window_kind = window, kind
        return window

    def stream(self, piece: str, summary: bool) -> None:
        """Add a streamed piece to the main text (after any deferred ones), or to the reasoning summary."""
        if summary:
            if self.streamed_summary is None:
                self.streamed_summary = StreamedText()
            self.streamed_summary.add(piece)
        else:
            self.commit()
            self.add(piece)

    def defer(self, window: TextWindow) -> None:
        """The main text's next pieces are the ones `window` takes from now on (past its texts' current end): they
        join the main text once, when the window flushes (its whole text in one piece when it deferred them all) or
        before the text is read or another piece joins it. A text delta inside a window then leaves this item's
        piece list, and the memory it holds, alone (`Sink.flush_all_text` hands the flushed text back)."""
        self.commit()
        other = window.deferring
        if other is not None:  # another item under the same id (closed, then opened again) deferred there first
            other.commit()
        self.deferred, self.deferred_from, window.deferring = window, len(window.texts), self

    def commit(self, joined: str | None = None) -> None:
        """The deferred pieces added to the main text, in order; `joined`: the window's whole text, at its flush."""
        window = self.deferred
        if window is None:
            return
        if joined is not None and self.deferred_from == 0:
            self.add(joined)
        else:
            for piece in window.texts[self.deferred_from :]:
                self.add(piece)
        self.deferred = None
        window.deferring = None

    @property
    def text(self) -> str:
        """The main text streamed into the item so far."""
        self.commit()
        return self.value()

    @property
    def summary_text(self) -> str:
        """The reasoning summary streamed into the item so far."""
        return "" if self.streamed_summary is None else self.streamed_summary.value()


class ThreadState:
    __slots__ = (
        "arrived",
        "cmd_snapshots",
        "current_turn",
        "heard",
        "item_by_pid",
        "last_turn",
        "open_items",
        "pending_accepted",
        "pending_progress",
        "pending_since",
        "pending_text",
        "pid_by_item",
        "progress_last_emit",
        "ptid_by_turn",
        "settled_keys",
        "text_key",
        "text_pid",
        "text_rec",
        "thread_id",
        "turn_by_ptid",
        "used",
        "windows",
    )  # fmt: skip

    def __init__(self, thread_id: str = "") -> None:
        # What a text delta reads comes first (the compiled class keeps its attributes in the order they are first
        # set here): at a thousand streaming threads a state is mostly out of the cache, and the delta then reaches
        # one or two of its lines, not three or four.
        # The thread's id as the assembler's map holds it: the string every later lookup of the thread's maps (the
        # guard's, the journal's, the flush queue's) is given, so each finds its key by identity, not by comparing
        # a freshly decoded copy with a key long out of the cache.
        self.thread_id = thread_id
        self.used = 0  # the assembler's use count when it last served this thread (least recently used: lowest)
        # The clock (ms) of the latest notification whose deltas reached this state, and whether its owner has been
        # told the thread arrived (`Assembler.arrivals`): what the daemon's watchdogs and a bridge's membership read,
        # kept here because a delta already reaches this line (a set of a read's threads would cost more per delta).
        self.heard = 0.0
        self.arrived = False
        self.current_turn: str | None = None
        # the windows holding text, in the order they began to: joined once each, at the flush
        self.pending_text: list[TextWindow] = []
        # the earliest `last` of the windows in `pending_text`; NOT_HOLDING while it is empty (`holds_text`): read
        # here, it spares a delta a look at the list, in another line of memory
        self.pending_since = NOT_HOLDING
        self.pending_progress: dict[str, tuple[Event, bool]] = {}
        # The provider item id of the last text delta keyed by it alone, its key, and the open item under that key
        # (None: not looked up since `open_items` last changed). `open_items` changes only through the methods below.
        self.text_pid = ""
        self.text_key = key_of("", UNSET, UNSET)
        self.text_rec: OpenItem | None = None
        self.windows: dict[str, TextWindow] = {}  # by `stream_key`, oldest first (bounded by MAX_MAP)
        self.last_turn: str | None = None
        self.pending_accepted: list[str] = []
        self.open_items: dict[str, OpenItem] = {}
        self.cmd_snapshots: dict[str, str] = {}
        self.item_by_pid: dict[str, str] = {}
        self.pid_by_item: dict[str, str] = {}
        self.turn_by_ptid: dict[str, str] = {}
        self.ptid_by_turn: dict[str, str] = {}
        self.settled_keys: dict[str, None] = {}
        self.progress_last_emit: dict[str, float] = {}

    def put_item(self, key: str, rec: OpenItem) -> None:
        """`rec` open under `key` (replacing any item open under it)."""
        self.open_items[key] = rec
        self.text_rec = rec if key is self.text_key else None

    def drop_item(self, key: str) -> OpenItem | None:
        """The item open under `key`, no longer open (None when none was)."""
        self.text_rec = None
        return self.open_items.pop(key, None)

    def keep_attached_items(self) -> None:
        """A turn's end: only the items attached to the thread stay open."""
        self.text_rec = None
        self.open_items = {k: rec for k, rec in self.open_items.items() if rec.thread_attached}

    def holds_text(self) -> bool:
        """Whether some window holds text (`pending_text` is not empty)."""
        return self.pending_since != NOT_HOLDING

    def text_due(self, now: float, window_ms: float) -> bool:
        """Whether held text is due: some window holding text has elapsed. A window's `last` does not move while it
        holds text, so the earliest of them (`pending_since`) answers for all (never, while none holds any)."""
        return now - self.pending_since >= window_ms

    def pinned(self) -> bool:
        """Threads with open work are never evicted."""
        return bool(self.current_turn or self.open_items or self.pending_accepted or self.holds_text())

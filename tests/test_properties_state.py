"""Property tests over the assembler's per-thread state: at most 256 idle states, pinned ones kept, LRU eviction
(§4.3), and streamed text that reads back exactly what was added."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bbridge.core import grammar as g
from bbridge.core.assembler import MAX_THREADS, Assembler
from bbridge.core.state import MAX_MAP, STREAMED_CHUNK, StreamedText
from tests.delta_streams import ENTROPY, PROVIDER, params
from tests.support import TASK

# -- bounded state ------------------------------------------------------------------------------


def _batch(*batch: dict[str, Any], thread: str) -> list[g.Delta]:
    return g.convert_params(params(*batch, thread=thread)).deltas


SHORT_TURN = [
    {"kind": "turn.open"},
    {"kind": "item.textDelta", "key": {"channel": "assistant"}, "channel": "agentMessage", "text": "hi"},
    {"kind": "turn.boundary", "status": "completed"},
]


def test_ten_thousand_short_threads_leave_at_most_256_states() -> None:
    assembler = Assembler(PROVIDER, ENTROPY, text_delta_flush_ms=100)
    deltas_ = _batch(*SHORT_TURN, thread="t")
    peak = 0
    for n in range(10_000):
        events = assembler.assemble(f"thr_{n}", deltas_, n)
        assert events[0]["type"] == "turn/started"
        peak = max(peak, assembler.thread_count())
    assert MAX_THREADS == 256
    assert peak <= 256
    assert assembler.thread_count() == 256
    assert assembler.get_bb_turn_id("thr_0", "x") is None
    assert assembler.get_open_turn_id("thr_0") is None


def test_pinned_threads_are_never_evicted() -> None:
    assembler = Assembler(PROVIDER, ENTROPY, text_delta_flush_ms=100)
    # an open unkeyed turn
    (started,) = assembler.assemble("open-turn", _batch({"kind": "turn.open"}, thread="x"), 0)
    turn = started["scope"]["turnId"]
    # thread-attached background work outliving its turn
    task = {"kind": "item.open", "key": {"providerItemId": "task-1"}, "item": TASK}
    assembler.assemble(
        "open-task",
        _batch({"kind": "turn.open"}, task, {"kind": "turn.boundary", "status": "completed"}, thread="x"),
        0,
    )
    # accepted input waiting for a turn
    assembler.assemble(
        "pending-input", _batch({"kind": "input.accepted", "clientRequestId": "creq_abcdefghjk"}, thread="x"), 0
    )
    # buffered text on a keyed turn (no unkeyed turn open)
    text = {
        "kind": "item.textDelta",
        "key": {"channel": "a"},
        "channel": "agentMessage",
        "text": "x",
        "providerTurnId": "pt",
    }
    assembler.assemble("pending-text", _batch(text, thread="x"), 0)
    assert assembler.assemble("pending-text", _batch(text, thread="x"), 10) == []  # buffered
    # and one unpinned thread that only remembers a settled turn
    assembler.assemble("idle", _batch(*SHORT_TURN, thread="x"), 0)

    short = _batch(*SHORT_TURN, thread="x")
    for n in range(10_000):
        assembler.assemble(f"thr_{n}", short, 20)
        assert assembler.thread_count() <= 256
    assert assembler.get_open_turn_id("open-turn") == turn
    assert assembler.get_bb_item_id("open-task", "task-1") is not None
    assert assembler.get_bb_turn_id("pending-text", "pt") is not None
    assert assembler.get_bb_item_id("idle", "x") is None and assembler.get_open_turn_id("idle") is None

    (completed,) = assembler.assemble(
        "open-turn", _batch({"kind": "turn.boundary", "status": "completed"}, thread="x"), 30
    )
    assert completed["type"] == "turn/completed" and completed["scope"]["turnId"] == turn
    claimed = assembler.assemble("pending-input", _batch({"kind": "turn.open"}, thread="x"), 30)
    assert [e["type"] for e in claimed] == ["turn/started", "turn/input/accepted"]
    assert claimed[1]["clientRequestId"] == "creq_abcdefghjk"
    flushed = assembler.assemble("pending-text", [], 1000)
    assert [(e["type"], e["delta"]) for e in flushed] == [("item/agentMessage/delta", "x")]
    closed = assembler.assemble(
        "open-task",
        _batch(
            {"kind": "item.close", "key": {"providerItemId": "task-1"}, "status": "completed", "item": TASK}, thread="x"
        ),
        30,
    )
    assert [e["type"] for e in closed] == ["item/backgroundTask/completed"]


@pytest.mark.parametrize("flush_ms", [0, 100])
def test_eviction_is_least_recently_used(flush_ms: int) -> None:
    assembler = Assembler(PROVIDER, ENTROPY, text_delta_flush_ms=flush_ms)
    ptid_turn = {"kind": "turn.open", "providerTurnId": "pt"}
    for n in range(256):
        assembler.assemble(f"thr_{n}", _batch(ptid_turn, thread="x"), 0)
    assembler.assemble("thr_0", [], 0)  # an empty batch does not refresh the LRU position
    assembler.assemble("thr_1", _batch({"kind": "context.cleared"}, thread="x"), 0)  # a delta does
    assembler.assemble("thr_new", _batch(ptid_turn, thread="x"), 0)
    assert assembler.thread_count() == 256
    assert assembler.get_bb_turn_id("thr_0", "pt") is None  # evicted: least recently used
    assert assembler.get_bb_turn_id("thr_1", "pt") is not None
    assert assembler.get_bb_turn_id("thr_2", "pt") is not None


def test_a_state_evicted_at_birth_starts_over_at_every_delta() -> None:
    """assembler.md §19.5: with 256 pinned threads a new thread's state is pruned at once; each delta starts afresh."""
    assembler = Assembler(PROVIDER, ENTROPY, text_delta_flush_ms=100)
    for n in range(256):
        assembler.assemble(f"pinned_{n}", _batch({"kind": "turn.open"}, thread="x"), 0)
    text = {"kind": "item.textDelta", "key": {"channel": "a"}, "channel": "agentMessage", "text": "hi"}
    events = assembler.assemble("late", _batch({"kind": "turn.open"}, text, text, thread="x"), 0)
    assert [event["type"] for event in events] == ["turn/started"]  # the text deltas found no turn
    assert assembler.thread_count() == 256 and assembler.get_open_turn_id("late") is None


def test_without_eviction_at_birth_every_thread_at_work_keeps_its_state() -> None:
    """The daemon's assemblers (`evict_at_birth=False`): past 256 pinned threads a new thread's state is kept, so a
    bridge hosting 300 open turns assembles each of them; idle states are still evicted down to the bound."""
    assembler = Assembler(PROVIDER, ENTROPY, text_delta_flush_ms=0, evict_at_birth=False)
    text = {"kind": "item.textDelta", "key": {"channel": "a"}, "channel": "agentMessage", "text": "hi"}
    for n in range(300):
        events = assembler.assemble(f"open_{n}", _batch({"kind": "turn.open"}, text, thread="x"), 0)
        assert [event["type"] for event in events] == ["turn/started", "item/started", "item/agentMessage/delta"]
    assert assembler.thread_count() == 300
    for n in range(300):
        (delta,) = assembler.assemble(f"open_{n}", _batch(text, thread="x"), 1)
        assert delta["type"] == "item/agentMessage/delta"
        close = {"kind": "item.textClose", "key": {"channel": "a"}, "channel": "agentMessage"}
        closed = assembler.assemble(
            f"open_{n}", _batch(close, {"kind": "turn.boundary", "status": "completed"}, thread="x"), 2
        )
        assert [event["type"] for event in closed] == ["item/completed", "turn/completed"]
    assembler.assemble("one_more", _batch(*SHORT_TURN, thread="x"), 3)
    assert assembler.thread_count() == 256  # nothing pinned any more: pruned back to the bound


# -- streamed text: pieces in, the same text out, at any length -------------------------------------------


@given(st.lists(st.lists(st.text(max_size=3), max_size=700), min_size=1, max_size=4))
def test_streamed_text_reads_back_exactly_what_was_added_across_chunks(rounds: list[list[str]]) -> None:
    streamed, added = StreamedText(), ""
    for pieces in rounds:  # reads between rounds: a read joins the text, later pieces go on after it
        for piece in pieces:
            streamed.add(piece)
        added += "".join(pieces)
        assert streamed.value() == added and streamed.value() == added


def test_a_long_streamed_answer_completes_with_its_whole_text() -> None:
    pieces = [f" w{n}" for n in range(3 * STREAMED_CHUNK + 7)]  # several chunks and a tail
    deltas: list[dict[str, Any]] = [{"kind": "turn.open"}]
    deltas += [
        {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": "agentMessage", "text": p} for p in pieces
    ]
    deltas.append({"kind": "item.textClose", "key": {"providerItemId": "m"}, "channel": "agentMessage"})
    params = g.decode_params(json.dumps({"threadId": "t", "deltas": deltas}).encode())
    events = Assembler("p", "test", text_delta_flush_ms=0).assemble("t", params.deltas, 0.0)
    completed = [e for e in events if e["type"] == "item/completed"]
    assert [e["item"]["text"] for e in completed] == ["".join(pieces)]


def test_a_burst_within_one_coalescing_window_merges_into_its_whole_text() -> None:
    pieces = [f" w{n}" for n in range(2 * STREAMED_CHUNK + 9)]
    text = [
        {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": "agentMessage", "text": p} for p in pieces
    ]
    assembler = Assembler("p", "test", text_delta_flush_ms=100)
    opened = assembler.assemble("t", g.decode_params(b'{"threadId":"t","deltas":[{"kind":"turn.open"}]}').deltas, 0.0)
    burst = assembler.assemble("t", g.decode_params(json.dumps({"threadId": "t", "deltas": text}).encode()).deltas, 1.0)
    flushed = assembler.assemble("t", [], 200.0)  # the window has passed: the pending text comes out
    deltas = [e["delta"] for e in opened + burst + flushed if e["type"] == "item/agentMessage/delta"]
    assert len(deltas) == 2 and "".join(deltas) == "".join(pieces)  # the first piece at once, the rest merged


def _text(item: str, piece: str) -> dict[str, Any]:
    return {"kind": "item.textDelta", "key": {"providerItemId": item}, "channel": "agentMessage", "text": piece}


def test_a_text_window_trimmed_out_of_its_thread_starts_afresh() -> None:
    """A thread keeps at most MAX_MAP text windows (the oldest go first, while no text is held). A stream whose window
    was trimmed out emits its next delta at once, as its first did, even though its open item had kept that window
    from its last delta; a stream whose window is kept holds its next delta for the window's flush."""
    assembler = Assembler("p", "test", text_delta_flush_ms=100)

    def run(now: float, *deltas: dict[str, Any]) -> list[str]:
        batch = g.decode_params(json.dumps({"threadId": "t", "deltas": list(deltas)}).encode()).deltas
        return [e["delta"] for e in assembler.assemble("t", batch, now) if e["type"] == "item/agentMessage/delta"]

    assert run(0.0, {"kind": "turn.open"}, _text("first", "a"), _text("first", "b")) == ["a"]  # "b" is held
    many = [_text(f"m{n}", f"<{n}>") for n in range(MAX_MAP)]  # a new window each: "first"'s held text goes first
    assert run(1.0, *many) == ["b"] + [f"<{n}>" for n in range(MAX_MAP)]
    assert run(2.0, _text("first", "c")) == ["c"]  # trimmed out: at once, in a window made anew
    assert run(3.0, _text(f"m{MAX_MAP - 1}", "d")) == []  # kept: held
    assert run(4.0, _text("first", "e")) == []  # its new window holds it
    assert run(150.0) == ["d", "e"]  # both windows have passed: held text in the order it began to be held


@given(
    st.lists(
        st.tuples(st.sampled_from(["agentMessage", "reasoningText", "reasoningSummary"]), st.integers(0, 150)),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 5),
)
def test_an_items_text_keeps_its_pieces_order_whatever_windows_hold_them(
    steps: list[tuple[str, int]], batch: int
) -> None:
    """An item's main text is its pieces in arrival order, with coalescing (pieces wait in their window until it
    flushes: `OpenItem.defer`) as without, across two channels' windows of one item, batches, elapsed windows, and a
    read of the streamed text between batches; the item's completed text says the same."""
    deltas = [
        {"kind": "item.textDelta", "key": {"providerItemId": "m"}, "channel": channel, "text": f"{channel[0]}{n}."}
        for n, (channel, _) in enumerate(steps)
    ]
    close = {"kind": "item.textClose", "key": {"providerItemId": "m"}, "channel": "agentMessage"}
    main = "".join(d["text"] for d in deltas if d["channel"] != "reasoningSummary")
    completed: list[list[Any]] = []
    for flush_ms in (100, 0):  # without coalescing no piece ever waits in a window
        assembler = Assembler("p", "test", text_delta_flush_ms=flush_ms)
        now = 0.0
        assembler.assemble("t", _batch({"kind": "turn.open"}, thread="t"), now)
        seen = ""
        for start in range(0, len(deltas), batch):
            now += sum(gap for _, gap in steps[start : start + batch])
            assembler.assemble("t", _batch(*deltas[start : start + batch], thread="t"), now)
            streamed = assembler.streamed_text("t")
            seen = next(iter(streamed.values()))[0] if streamed else ""
            assert main.startswith(seen)
        assert seen == main
        events = assembler.assemble("t", _batch(close, thread="t"), now + 1)
        completed.append([e["item"] for e in events if e["type"] == "item/completed"])
    assert completed[0] == completed[1]

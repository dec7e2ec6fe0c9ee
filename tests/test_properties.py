"""Property tests over the assembler (assembler.md §16.4 and friends): envelope, ids, items, coalescing, settlement.

The streams come from `tests/delta_streams.py`; the bounds on state and the guard have their own files.
"""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from bbridge.core import grammar as g
from bbridge.core.events import EVENT_TYPES, TEXT_EVENT_TYPES, encode_event
from tests.delta_streams import (
    ITEM_ID,
    PARENTS,
    PIDS,
    PROGRESS_TYPES,
    PROPS,
    PROVIDER,
    PTIDS,
    SCOPE_POLICY,
    STREAMED_TEXT_TYPES,
    THREADS,
    TURN_ID,
    Config,
    Event,
    Stream,
    guarded,
    item_ids,
    params,
    run,
    streams,
    subject,
)

# -- envelope, scope, ids -----------------------------------------------------------------


@PROPS
@given(stream=streams(), flush_ms=st.sampled_from((0, 100)))
def test_envelope_scope_policy_and_ids(stream: Stream, flush_ms: int) -> None:
    result = run(stream, flush_ms=flush_ms)
    turn_thread: dict[str, str] = {}
    item_thread: dict[str, str] = {}
    for thread, events in result.steps:
        for event in events:
            kind = event["type"]
            assert kind in EVENT_TYPES
            keys = list(event)
            if kind == "thread/started":
                assert keys == ["type", "threadId", "scope"]
            else:
                assert keys[:3] == ["type", "threadId", "providerThreadId"]
                assert event["providerThreadId"] == ("prov-1" if kind == "thread/identity" else "")
            assert event["threadId"] == ""
            if kind == "provider/unhandled":
                assert keys[3:7] == ["providerId", "rawType", "rawEvent", "scope"]
                assert event["providerId"] == PROVIDER
            elif kind != "thread/started":
                assert keys[3] == "scope"
            # §3.2 policy column
            scope = event["scope"]
            policy = SCOPE_POLICY[kind]
            if scope["kind"] == "turn":
                assert list(scope) == ["kind", "turnId"] and policy in ("turn", "either"), event
                assert TURN_ID.match(scope["turnId"]), event
                assert turn_thread.setdefault(scope["turnId"], thread) == thread, "a turn id names two threads"
            else:
                assert scope == {"kind": "thread"} and policy in ("thread", "either"), event
            # ids: minted formats; the only raw ids are those of progress for an unknown provider id (§5.1, §8.3)
            for item_id in item_ids(event):
                if kind in PROGRESS_TYPES and item_id == subject(event) and item_id in PIDS:
                    continue
                assert ITEM_ID.match(item_id), event
                assert item_thread.setdefault(item_id, thread) == thread, "an item id names two threads"
            # the encoder keeps every key in place
            assert list(json.loads(encode_event(event))) == keys


@PROPS
@given(stream=streams(Config(keyed_lifecycle=False)), flush_ms=st.sampled_from((0, 100)))
def test_unkeyed_turns_start_and_settle_once(stream: Stream, flush_ms: int) -> None:
    """Without keyed turn.open/turn.boundary/settling errors (which may repeat or settle never-started
    provider turns, §7.5, §7.6, X43), every unkeyed turn starts once and settles at most once."""
    result = run(stream, flush_ms=flush_ms)
    for _, event, violation in guarded(result):
        if event["type"] in ("turn/started", "turn/completed"):
            assert violation is None, (event, violation)
    started = [e["scope"]["turnId"] for e in result.all_events() if e["type"] == "turn/started"]
    assert len(started) == len(set(started))
    numbers = [int(t.rsplit("-t", 1)[1]) for t in started]
    assert numbers == sorted(numbers), "unkeyed turns are minted in start order"


# -- items: first events and the spec's exceptions ------------------------------------


@PROPS
@given(stream=streams(), flush_ms=st.sampled_from((0, 100)))
def test_item_first_events_and_guard(stream: Stream, flush_ms: int) -> None:
    """An item's first event is `item/started` except where the spec says otherwise: output deltas never
    synthesize an open (§8.6, X23), bare and late closes complete without one (§8.2, §8.5, X05), progress
    may carry a raw or throwaway id or target an unopened task (§8.3, X42), and a text delta for a provider
    id that is mapped but not open streams under the old id (§8.4, X29). Every such delta-like event is
    dropped by the guard; item/started itself never is."""
    started: dict[str, set[str]] = defaultdict(set)
    settled: dict[str, set[str]] = defaultdict(set)
    for thread, event, violation in guarded(run(stream, flush_ms=flush_ms)):
        kind = event["type"]
        item_id = subject(event)
        if kind == "item/started":
            assert violation is None
            started[thread].add(item_id)
        elif item_id is not None and item_id not in started[thread]:
            if kind in TEXT_EVENT_TYPES or kind in PROGRESS_TYPES:
                assert violation is not None and violation.rule == "item/opens-before-delta", event
            else:
                assert kind in ("item/completed", "item/backgroundTask/completed", "item/delegation/completed")
                if item_id in settled[thread]:  # e.g. a bare close under another key naming the same provider id
                    assert violation is not None and violation.rule == "item/settles-once", event
                else:
                    assert violation is None, "completing an item that never opened is allowed"
                    settled[thread].add(item_id)


@PROPS
@given(stream=streams(Config(text_pid_keys=False)), flush_ms=st.sampled_from((0, 100)))
def test_channel_keyed_text_always_streams_into_a_started_item(stream: Stream, flush_ms: int) -> None:
    """Text deltas whose keys carry no providerItemId never hit a stale mapping: each one streams into an
    item this thread started and has not settled, so the guard keeps all of them (coalesced ones too)."""
    for _, event, violation in guarded(run(stream, flush_ms=flush_ms)):
        if event["type"] in STREAMED_TEXT_TYPES:
            assert violation is None, event


def _after_progress(events: list[Event]) -> list[Event]:
    """Drop the trailing-edge progress a batch may flush at its start (§10.3)."""
    i = 0
    while i < len(events) and events[i]["type"] in PROGRESS_TYPES:
        i += 1
    return events[i:]


@PROPS
@given(stream=streams(), channel=st.sampled_from(("agentMessage", "reasoningSummary", "reasoningText", "plan")))
def test_text_delta_on_a_fresh_key_opens_the_item(stream: Stream, channel: str) -> None:
    result = run(stream)
    delta = {
        "kind": "item.textDelta",
        "key": {"channel": "probe"},
        "channel": channel,
        "text": "t",
        "providerTurnId": "pt-9",
    }
    events = _after_progress(result.assembler.assemble("thr_a", g.convert_params(params(delta)).deltas, stream.end + 1))
    assert [e["type"] for e in events] == ["item/started", _text_type(channel)]
    assert events[0]["item"]["id"] == events[1]["itemId"]
    assert (
        events[0]["scope"]
        == events[1]["scope"]
        == {"kind": "turn", "turnId": result.assembler.get_bb_turn_id("thr_a", "pt-9")}
    )


@PROPS
@given(stream=streams(), channel=st.sampled_from(("command", "fileChange")))
def test_output_delta_never_synthesizes_an_open(stream: Stream, channel: str) -> None:
    result = run(stream)
    delta = {
        "kind": "item.outputDelta",
        "key": {"providerItemId": "probe"},
        "channel": channel,
        "text": "o",
        "providerTurnId": "pt-9",
    }
    events = _after_progress(result.assembler.assemble("thr_a", g.convert_params(params(delta)).deltas, stream.end + 1))
    assert [e["type"] for e in events] == [
        f"item/{'commandExecution' if channel == 'command' else 'fileChange'}/outputDelta"
    ]
    assert result.assembler.get_bb_item_id("thr_a", "probe") == events[0]["itemId"]  # registered all the same


def _text_type(channel: str) -> str:
    return {
        "agentMessage": "item/agentMessage/delta",
        "reasoningSummary": "item/reasoning/summaryTextDelta",
        "reasoningText": "item/reasoning/textDelta",
        "plan": "item/plan/delta",
    }[channel]


# -- coalescing ---------------------------------------------------------------------------


def _text_key(event: Event) -> tuple[str, str]:
    return event["type"], event["itemId"]


@PROPS
@given(stream=streams())
def test_coalescing_keeps_order_and_text(stream: Stream) -> None:
    """flush 100 vs flush 0 on the same stream and clock: per thread, the non-text events are identical and
    in the same order, and before each of them every stream has emitted exactly the same text (so text
    never moves across another event); a reset output delta is never merged; nothing is left buffered."""
    plain, coalesced = run(stream, flush_ms=0), run(stream, flush_ms=100)
    plain_threads, coalesced_threads = plain.by_thread(), coalesced.by_thread()
    assert plain_threads.keys() == coalesced_threads.keys()
    for thread, plain_events in plain_threads.items():
        segments = []
        for events in (plain_events, coalesced_threads[thread]):
            barriers: list[bytes] = []
            text: dict[tuple[str, str], str] = defaultdict(str)
            snapshots = []
            resets = []
            for event in events:
                if event["type"] in TEXT_EVENT_TYPES:
                    text[_text_key(event)] += event["delta"]
                    if event.get("reset") is True:
                        resets.append(encode_event(event))
                else:
                    snapshots.append(dict(text))
                    barriers.append(encode_event(event))
            snapshots.append(dict(text))
            segments.append((barriers, snapshots, resets))
        assert segments[0] == segments[1], thread
    assert sum(len(e) for _, e in coalesced.steps) <= sum(len(e) for _, e in plain.steps)


@PROPS
@given(stream=streams())
def test_clock_only_matters_for_throttling(stream: Stream) -> None:
    """§16.4: with text_delta_flush_ms = 0 and no throttling, the output does not depend on the clock."""
    with_clock = run(stream, throttle_ms=0, clock=True)
    frozen = run(stream, throttle_ms=0, clock=False)
    assert [[encode_event(e) for e in events] for _, events in with_clock.steps] == [
        [encode_event(e) for e in events] for _, events in frozen.steps
    ]


# -- accepted input always ends in a terminal turn ------------------------------------------


@PROPS
@given(stream=streams(), flush_ms=st.sampled_from((0, 100)))
def test_accepted_input_reaches_a_completed_turn_after_session_ended(stream: Stream, flush_ms: int) -> None:
    """Every clientRequestId accepted without providerTurnId shows up in exactly one `turn/input/accepted`
    whose turn then gets `turn/completed` once `session.ended` arrives (it is the final batch here).
    Excluded, as the spec drops them on purpose: input accepted before a `session.reset` (all state is
    deleted, §11.12) or before a keyed settling `provider.error` (it ends the unkeyed turn without
    completing it, §11.7, X43)."""
    result = run(stream, flush_ms=flush_ms, tail=[{"kind": "session.ended"}])
    owed: dict[str, list[str]] = defaultdict(list)
    for thread, _, batch in stream.steps:
        for delta in batch:
            kind = delta["kind"]
            if kind == "session.reset" or (
                kind == "provider.error" and delta.get("settlesTurn") and "providerTurnId" in delta
            ):
                owed[thread].clear()
            elif kind == "input.accepted" and "providerTurnId" not in delta:
                owed[thread].append(delta["clientRequestId"])
    for thread, events in result.by_thread().items():
        for creq in owed[thread]:
            accepted = [
                i for i, e in enumerate(events) if e["type"] == "turn/input/accepted" and e["clientRequestId"] == creq
            ]
            assert len(accepted) == 1, creq
            turn = events[accepted[0]]["scope"]["turnId"]
            later = events[accepted[0] + 1 :]
            assert any(e["type"] == "turn/completed" and e["scope"]["turnId"] == turn for e in later), creq
        assert result.assembler.get_open_turn_id(thread) is None


# -- no exception, getters --------------------------------------------------------------------


@PROPS
@given(stream=streams(max_steps=40), flush_ms=st.sampled_from((0, 100)), throttle_ms=st.sampled_from((0, 500)))
def test_no_exception_on_valid_streams(stream: Stream, flush_ms: int, throttle_ms: int) -> None:
    result = run(
        stream, flush_ms=flush_ms, throttle_ms=throttle_ms, tail=[{"kind": "session.ended"}, {"kind": "session.reset"}]
    )
    assembler = result.assembler
    for event in result.all_events():
        encode_event(event)
    for thread in (*THREADS, "never-seen"):
        for pid in (*PIDS, *PARENTS, "x"):
            bb = assembler.get_bb_item_id(thread, pid)
            assert bb is None or assembler.get_provider_item_id(thread, bb) == pid
        for ptid in (*PTIDS, "x"):
            bb = assembler.get_bb_turn_id(thread, ptid)
            assert bb is None or assembler.get_provider_turn_id(thread, bb) == ptid
        assert assembler.get_open_turn_id(thread) is None  # session.ended then session.reset

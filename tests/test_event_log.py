"""The core's delivery path: stamping, checks, the guard's drops, seqs and the framed `thread/events` line."""

from __future__ import annotations

import gc
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.event_log import CHUNK, Delivery, EventLog, ThreadLog
from bbridge.core.events import Event
from bbridge.core.guard import Guard

WATCHED = frozenset({"turn/started", "turn/completed"})


def event(type_: str, **fields: Any) -> Event:
    return {"type": type_, "threadId": "", "providerThreadId": "", "scope": {"kind": "thread"}, **fields}


def delivery(log: EventLog | None = None, check: Any = None) -> tuple[Delivery, dict[str, str]]:
    provider_threads: dict[str, str] = {}
    made = Delivery(
        "prov",
        Assembler("prov", "test"),
        Guard(),
        log or EventLog(100),
        provider_threads,
        WATCHED,
        check,
        frozenset({"thread/extensionState/updated"}),
    )
    return made, provider_threads


def test_seqs_count_per_thread_and_the_line_is_framed_from_the_entries() -> None:
    log = EventLog(100)
    first = log.record("a", "prov", [event("provider/warning", n=1), event("provider/warning", n=2)])
    log.record("b", "prov", [event("provider/warning", n=3)])
    single = log.record("a", "prov", [event("provider/warning", n=4)])
    message = json.loads(first)
    assert message["jsonrpc"] == "2.0" and message["method"] == "thread/events"
    assert message["params"]["threadId"] == "a" and message["params"]["providerId"] == "prov"
    assert [(e["seq"], e["event"]["n"]) for e in message["params"]["events"]] == [(1, 1), (2, 2)]
    assert [e["seq"] for e in json.loads(single)["params"]["events"]] == [3]
    assert single.endswith(b"]}}") and b"\n" not in single
    held = log.threads["a"].entries()
    assert [json.loads(e)["seq"] for e in held] == [1, 2, 3] and log.threads["a"].last_seq == 3
    assert first.endswith(b",".join(held[:2]) + b"]}}") and single.endswith(held[2] + b"]}}")  # the same bytes
    assert log.recorded == 4


def test_the_line_head_follows_the_provider_and_escapes_the_thread_id() -> None:
    log = EventLog(100)
    log.record('t"1', "one", [event("provider/warning")])
    line = log.record('t"1', "two", [event("provider/warning")])
    params = json.loads(line)["params"]
    assert (params["threadId"], params["providerId"], params["events"][0]["seq"]) == ('t"1', "two", 2)


def test_the_bound_keeps_the_newest_entries_and_the_seq_goes_on() -> None:
    log = EventLog(2)
    entries = log.append("a", [event("provider/warning", n=n) for n in range(5)])
    held = log.threads["a"]
    assert held.entries() == entries[-2:] and held.last_seq == 5 and held.first_held() == 4


def test_the_opener_sees_each_new_thread_once_and_its_writer_every_batch() -> None:
    opened: list[str] = []
    written: list[list[bytes]] = []

    def opener(thread_id: str, log: ThreadLog) -> None:
        opened.append(thread_id)
        log.last_seq = 41  # what a journal file held
        log.write = written.append

    log = EventLog(10, opener)
    log.append("a", [event("provider/warning")])
    log.append("a", [event("provider/warning"), event("provider/warning")])
    log.append("a", [])
    assert opened == ["a"]
    assert [[json.loads(e)["seq"] for e in batch] for batch in written] == [[42], [43, 44]]


def test_delivery_stamps_and_a_thread_identity_names_the_provider_thread_from_then_on() -> None:
    made, provider_threads = delivery()
    identity = event("thread/identity", providerThreadId="p-1")
    line = made.deliver("thr", [event("provider/warning", n=1), identity, event("provider/warning", n=2)])
    assert line is not None
    stamped = [e["event"] for e in json.loads(line)["params"]["events"]]
    assert [(e["threadId"], e["providerThreadId"]) for e in stamped] == [("thr", ""), ("thr", "p-1"), ("thr", "p-1")]
    assert provider_threads == {"thr": "p-1"}


def test_the_guard_drops_are_collected_and_nothing_is_journaled_for_them() -> None:
    made, _ = delivery()
    orphan = event("item/agentMessage/delta", itemId="item_x", delta="hi")
    assert made.deliver("thr", [orphan]) is None
    assert [(thread, e["type"], v.rule) for thread, e, v in made.dropped] == [
        ("thr", "item/agentMessage/delta", "item/opens-before-delta")
    ]
    assert "thr" not in made.log.threads


def test_the_check_replaces_what_it_refuses_and_only_sees_checked_types() -> None:
    seen: list[str] = []

    def check(e: Event) -> Event:
        seen.append(e["type"])
        return event("provider/unhandled", rawType="refused")

    made, _ = delivery(check=check)
    line = made.deliver("thr", [event("provider/warning"), event("thread/extensionState/updated", payload={})])
    assert line is not None
    assert [e["event"]["type"] for e in json.loads(line)["params"]["events"]] == [
        "provider/warning",
        "provider/unhandled",
    ]
    assert seen == ["thread/extensionState/updated"] and made.replaced == 1


def test_take_assembles_and_notices_the_watched_lifecycle_events_in_order() -> None:
    made, _ = delivery()
    deltas = grammar.decode_params(
        b'{"threadId":"thr","deltas":[{"kind":"turn.open"},{"kind":"turn.boundary","status":"completed"}]}'
    ).deltas
    line = made.take("thr", deltas, 0.0)
    assert line is not None
    types = [e["event"]["type"] for e in json.loads(line)["params"]["events"]]
    assert types[0] == "turn/started" and types[-1] == "turn/completed"
    assert [(thread, e["type"]) for thread, e in made.noticed] == [("thr", "turn/started"), ("thr", "turn/completed")]
    assert made.take("thr", [], 0.0) is None  # nothing assembled, nothing journaled


@given(
    bound=st.integers(1, 3 * CHUNK),
    batches=st.lists(st.integers(0, 2 * CHUNK + 3), max_size=12),
    skip=st.integers(0, 4 * CHUNK),
)
def test_a_thread_log_holds_the_newest_bound_entries_in_order(bound: int, batches: list[int], skip: int) -> None:
    """Held in chunks, the log answers as a deque of `bound` would: the newest entries, in order, from any skip."""
    log = ThreadLog(bound)
    appended: list[bytes] = []
    for size in batches:
        batch = [str(len(appended) + n).encode() for n in range(size)]
        appended += batch
        log.extend(batch)
        log.last_seq = len(appended)
        held = appended[len(appended) - min(bound, len(appended)) :]
        assert log.entries() == held and log.held == len(held)
        assert log.first_held() == len(appended) - len(held) + 1
        assert log.entries(skip) == held[skip:]


def test_held_entries_are_out_of_the_collectors_sight() -> None:
    """A full collection visits each chunk of entries at most, not each entry: the chunks are untracked tuples."""
    log = EventLog(10_000)
    for n in range(40):
        log.append("a", [event("provider/warning", n=n * CHUNK + k) for k in range(CHUNK)])
    gc.collect()
    held = log.threads["a"]
    assert held.chunks is not None and len(held.chunks) == 40 and not held.tail
    assert not any(gc.is_tracked(chunk) for chunk in held.chunks)

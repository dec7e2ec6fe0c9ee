"""Property tests over the assembler and the guard (assembler.md §16.4 and friends).

The strategy generates VALID `thread/delta` streams: several threads, a monotone
clock whose gaps straddle the 100 ms / 500 ms windows, keyed and unkeyed turns,
accepted input, items of many shapes, streamed text and output, progress,
session.ended and session.reset. Every generated batch must pass the grammar.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bbridge.core import grammar as g
from bbridge.core.assembler import MAX_THREADS, Assembler
from bbridge.core.events import EVENT_TYPES, TEXT_EVENT_TYPES, encode_event
from bbridge.core.guard import Guard
from bbridge.core.state import STREAMED_CHUNK, StreamedText
from tests.support import PRES, TASK

Event = dict[str, Any]
T = TypeVar("T")

ENTROPY = "E"
PROVIDER = "codex"
TURN_ID = re.compile(rf"^{ENTROPY}-t\d+$")
ITEM_ID = re.compile(rf"^{ENTROPY}-i\d+$")

THREADS = ("thr_a", "thr_b", "thr_c")
PIDS = ("p1", "p2", "p3")
CHANNEL_KEYS = ("assistant", "thinking")
PARENTS = ("agent-1", "p1")  # "p1" is also a provider item id: parent refs share that namespace (§5.2)
PTIDS = ("pt-1", "pt-2")
GAPS = (0, 1, 50, 99, 100, 101, 499, 500, 501)
CREQ_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"

RAW = {"raw": {"jsonrpc": "2.0", "method": "sdk/x"}, "rawType": "sdk/x"}
STATIC_SHAPES = (
    {"type": "command", "command": "ls", "cwd": "/"},
    {"type": "command", "command": "ls", "cwd": "/", "aggregatedOutput": "o", "exitCode": 0},
    {"type": "tool", "tool": "Read", "args": {"path": "a"}},
    {"type": "tool", "tool": "Read", "server": "fs", "args": [1], "result": None},
    {"type": "fileChange", "changes": [{"path": "a", "kind": "update", "oldText": "x\n", "newText": "y\n"}]},
    {"type": "reasoning", "summary": [], "content": []},
    {"type": "plan", "text": "p"},
    {"type": "fileRead", "path": "a"},
    {"type": "search", "mode": "content", "query": "q"},
    {"type": "planSteps", "steps": [{"step": "s"}]},
    {"type": "webSearch", "queries": ["q"]},
    {"type": "webFetch", "url": "u", "pattern": None},
    {"type": "imageView", "path": "i.png"},
    {"type": "compaction"},
    {"type": "extension", "kind": "plug/one", "payload": {"b": 1, "a": 2}},
    TASK,
    {**TASK, "status": "completed", "taskStatus": "completed"},
    {"type": "delegation", "childRef": "c1", "label": "L", "background": True},
    {"type": "delegation", "childRef": "c1", "label": "L", "background": False, "summary": "s"},
)
SNAPSHOTS = (TASK, {"type": "delegation", "childRef": "c1", "label": "L", "background": True, "summary": "half"})
OTHER_DELTAS = (
    {"kind": "usage", "total": {"totalTokens": 1, "inputTokens": 1, "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0}, "last": {"totalTokens": 1, "inputTokens": 1, "cachedInputTokens": 0, "outputTokens": 0, "reasoningOutputTokens": 0}, "modelContextWindow": None},
    {"kind": "contextWindow", "used": 5, "estimated": True, "attach": "currentOrLast"},
    {"kind": "contextWindow", "used": None, "size": 9, "estimated": False, "attach": "open", "providerTurnId": "pt-1"},
    {"kind": "context.compacted", "noTurnFallback": RAW},
    {"kind": "context.cleared"},
    {"kind": "turn.diff", "diff": "d"},
    {"kind": "thread.started"},
    {"kind": "thread.identity", "providerThreadId": "prov-1"},
    {"kind": "thread.name", "name": "n"},
    {"kind": "extension.state", "extensionKind": "plug/one", "payload": None},
    {"kind": "provider.warning", "vouchedTurn": True},
    {"kind": "provider.modelFallback", "originalModel": "a", "fallbackModel": "b", "reason": "provider", "message": "m"},
    {"kind": "unhandled", "raw": {"jsonrpc": "2.0", "method": "m"}, "rawType": "r", "vouchedTurn": True, "onlyIfNoTurn": True},
    {"kind": "unhandled", "raw": {"jsonrpc": "2.0", "method": "m"}, "rawType": "r", "vouchedTurn": False, "parentRef": "agent-1", "providerTurnId": "pt-2"},
    {"kind": "provider.rateLimits", "rateLimits": {"providerId": "codex", "status": "allowed", "kind": "credits", "windows": [], "reachedReason": None, "overageStatus": None, "overageReason": None}},
)  # fmt: skip

# §3.2 scope policy column: "turn", "thread" or "either".
SCOPE_POLICY = {
    "turn/started": "turn", "turn/completed": "turn", "turn/input/accepted": "turn", "item/started": "turn",
    "item/completed": "turn", "item/agentMessage/delta": "turn", "item/reasoning/summaryTextDelta": "turn",
    "item/reasoning/textDelta": "turn", "item/plan/delta": "turn", "item/commandExecution/outputDelta": "turn",
    "item/fileChange/outputDelta": "turn", "item/toolCall/progress": "turn", "item/backgroundTask/progress": "thread",
    "item/backgroundTask/completed": "thread", "item/delegation/progress": "thread",
    "item/delegation/completed": "thread", "thread/tokenUsage/updated": "turn",
    "thread/contextWindowUsage/updated": "either", "thread/compacted": "turn", "thread/context/cleared": "turn",
    "turn/diff/updated": "turn", "provider/error": "either", "provider/warning": "either",
    "provider/modelFallback": "either", "provider/unhandled": "either", "provider/rateLimits/updated": "thread",
    "thread/extensionState/updated": "thread", "thread/started": "thread", "thread/identity": "thread",
    "thread/name/updated": "thread",
}  # fmt: skip
PROGRESS_TYPES = frozenset({"item/toolCall/progress", "item/backgroundTask/progress", "item/delegation/progress"})
STREAMED_TEXT_TYPES = frozenset(
    {"item/agentMessage/delta", "item/reasoning/summaryTextDelta", "item/reasoning/textDelta", "item/plan/delta"}
)

# -- the stream strategy --------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    text_pid_keys: bool = True  # text deltas/closes may carry a providerItemId (else channel-only keys)
    keyed_lifecycle: bool = True  # keyed turn.open / turn.boundary / settling provider.error allowed


@dataclass
class Stream:
    steps: list[tuple[str, int, list[dict[str, Any]]]] = field(default_factory=list)  # (thread, now, deltas)

    @property
    def threads(self) -> list[str]:
        return sorted({thread for thread, _, _ in self.steps})

    @property
    def end(self) -> int:
        return self.steps[-1][1] if self.steps else 0


class Picks:
    """The choices of one step, read off one Hypothesis draw of bytes: the bytes as one number, each choice a
    digit of it (a mixed radix, the first choices in the first bytes).

    Hypothesis spends tens of microseconds on every draw, and a stream drawn field by field took ~240 of them
    (~40 ms an example, nearly all of the soak's time); read off one bytes draw per step, a stream takes ~15.
    Each choice is uniform over its options to within 2^-32 (STEP_BYTES keeps 32 bits spare), a repeated option
    weighs more, and zero bytes, where the shrinker takes them, pick each choice's first option: the simplest."""

    def __init__(self, data: bytes) -> None:
        self.rest = int.from_bytes(data, "little")
        self.span = 1  # the product of the sizes of the choices made so far

    def index(self, n: int) -> int:
        self.rest, i = divmod(self.rest, n)
        self.span *= n
        return i

    def pick(self, options: Sequence[T]) -> T:
        return options[self.index(len(options))]

    def maybe(self, value: Any, chance: int = 3) -> Any:
        """`value` with probability 1/chance, else None."""
        return value if self.index(chance) == chance - 1 else None

    def text(self) -> str:
        return self.pick(TEXTS[self.pick(TEXT_LENGTHS)])


def _put(delta: dict[str, Any], **fields: Any) -> dict[str, Any]:
    delta.update({k: v for k, v in fields.items() if v is not None})
    return delta


# Texts of up to 4 characters over a small alphabet, lengths weighted as Hypothesis's st.text(max_size=4) draws
# them (its `many`: a mean of 2, a quarter empty, most often 4).
TEXT_ALPHABET = " ab\n\u2028é\U0001f600"
TEXTS = tuple(tuple(map("".join, itertools.product(TEXT_ALPHABET, repeat=n))) for n in range(5))
TEXT_LENGTHS = (0,) * 5 + (1,) * 4 + (2,) * 3 + (3,) * 2 + (4,) * 6
BATCH_SIZES = TEXT_LENGTHS  # a batch of up to 4 deltas, weighted alike (st.lists(max_size=4))
BURST_SIZES = (0,) * 5 + (1,) * 2 + (2,) + (3,) * 2  # half the time no burst, else 1-3 more pieces
# A key holds some of these fields: how many weighted as st.fixed_dictionaries(optional=...) draws them (its `many`:
# 1.5 on average, most often all or none), which ones alike, each value alike.
KEY_FIELDS = (("providerItemId", PIDS), ("channel", CHANNEL_KEYS), ("parentRef", PARENTS))
KEY_FIELD_COUNTS = (0,) * 6 + (1,) * 4 + (2,) * 3 + (3,) * 7
KEY_FIELD_SETS = tuple(tuple(itertools.combinations(KEY_FIELDS, n)) for n in range(len(KEY_FIELDS) + 1))
# text keys repeat often, so streams actually accumulate (and coalesce): half the text keys are these
COMMON_CHANNEL_KEYS = ({"channel": "assistant"}, {"channel": "thinking", "parentRef": "agent-1"})
COMMON_TEXT_KEYS = (*COMMON_CHANNEL_KEYS, {"providerItemId": "p1"})


def any_key(p: Picks) -> dict[str, str]:
    return {name: p.pick(values) for name, values in p.pick(KEY_FIELD_SETS[p.pick(KEY_FIELD_COUNTS)])}


def text_key(p: Picks, cfg: Config) -> dict[str, str]:
    """Half the time a common key; else any key, or with channel-only text keys a channel and maybe a parent."""
    if p.index(2) == 0:
        return dict(p.pick(COMMON_TEXT_KEYS if cfg.text_pid_keys else COMMON_CHANNEL_KEYS))
    if cfg.text_pid_keys:
        return any_key(p)
    return _put({"channel": p.pick(CHANNEL_KEYS)}, parentRef=p.maybe(p.pick(PARENTS), 2))


SHAPES = STATIC_SHAPES + (None,) * len(STATIC_SHAPES)  # None: an agentMessage with a drawn text (half the shapes)
PTID_OPTIONS = (None, None, None, *PTIDS)
KINDS = (
    ["turn.open"] * 3 + ["turn.boundary"] * 2 + ["input.accepted"] * 2 + ["item.open"] * 3 + ["item.close"] * 2
    + ["item.progress"] * 2 + ["item.textDelta"] * 5 + ["item.textClose"] * 2 + ["item.outputDelta"] * 2
    + ["command.outputSnapshot", "session.ended", "session.reset", "provider.error", "other"]
)  # fmt: skip
# The most a step reads: 9.1 bits (gap, thread, batch size), up to 4 deltas of at most 43.3 bits (item.close: kind,
# ptid, noTurnFallback, key, shape, a text's length and characters, status, resultText, presentation), a burst of
# at most 50 bits (its size, 3 texts): 232 bits, and 32 spare.
STEP_BYTES = 33
STEP = st.binary(min_size=STEP_BYTES, max_size=STEP_BYTES)


def delta(p: Picks, cfg: Config) -> dict[str, Any]:
    kind = p.pick(KINDS)
    d: dict[str, Any] = {"kind": kind}
    ptid = p.pick(PTID_OPTIONS)
    ntf = p.maybe(RAW)
    if kind == "turn.open":
        if cfg.keyed_lifecycle:
            _put(d, providerTurnId=ptid, parentRef=p.maybe("agent-1"))
    elif kind == "turn.boundary":
        d["status"] = p.pick(("completed", "failed", "interrupted"))
        _put(d, claimIfIdle=p.maybe(True, 2), providerTurnId=ptid if cfg.keyed_lifecycle else None)
    elif kind == "input.accepted":
        _put(d, clientRequestId="creq_aaaaaaaaaa", providerTurnId=p.maybe("pt-1", 4))
    elif kind in ("item.open", "item.close"):
        d["key"] = any_key(p)
        shape = p.pick(SHAPES) or {"type": "agentMessage", "text": p.text()}
        if kind == "item.close":
            d["status"] = p.pick(("completed", "failed", "interrupted", "pending"))
            _put(d, resultText=p.maybe("r"))
        d["item"] = shape
        pres = PRES if shape["type"] == "extension" else p.maybe(PRES)
        attach = p.maybe("currentOrLast") if kind == "item.open" else None
        _put(d, presentation=pres, attach=attach, providerTurnId=ptid, noTurnFallback=ntf)
    elif kind == "item.progress":
        d["key"] = any_key(p)
        snapshot = p.pick((None, None, *SNAPSHOTS))
        _put(d, message=p.maybe("m", 2), snapshot=snapshot, flush=p.maybe(True, 4))
        _put(d, providerTurnId=ptid, noTurnFallback=ntf)
    elif kind in ("item.textDelta", "item.textClose"):
        d["key"] = text_key(p, cfg)
        d["channel"] = p.pick(("agentMessage", "reasoningSummary", "reasoningText", "plan"))
        text = p.text() if kind == "item.textDelta" or p.index(2) else None
        _put(d, text=text, providerTurnId=ptid, noTurnFallback=ntf)
    elif kind == "item.outputDelta":
        d["key"] = any_key(p)
        d["channel"] = p.pick(("command", "fileChange"))
        _put(d, text=p.text(), providerTurnId=ptid, noTurnFallback=ntf)
    elif kind == "command.outputSnapshot":
        d["key"] = any_key(p)
        _put(d, text=p.pick(("", "a", "ab", "abc", "x")), noTurnFallback=ntf)
    elif kind == "provider.error":
        d["message"] = "boom"
        settles = p.maybe(True, 2)
        ptid = p.maybe("pt-2") if cfg.keyed_lifecycle or not settles else None
        _put(d, settlesTurn=settles, willRetry=p.maybe(True), providerTurnId=ptid)
        _put(d, threadScoped=p.maybe(True, 4))
    elif kind == "other":
        return dict(p.pick(OTHER_DELTAS))
    return d


@st.composite
def streams(draw: st.DrawFn, cfg: Config = Config(), max_steps: int = 25) -> Stream:
    stream = Stream()
    now = 1_787_000_000_000
    creq = 0
    for _ in range(draw(st.integers(1, max_steps))):
        p = Picks(draw(STEP))
        now += p.pick(GAPS)
        thread = p.pick(THREADS)
        batch = [delta(p, cfg) for _ in range(p.pick(BATCH_SIZES))]
        burst = p.pick(BURST_SIZES)
        if batch and batch[-1]["kind"] in ("item.textDelta", "item.outputDelta") and burst:
            # a burst on the same stream: what coalescing merges
            batch.extend({**batch[-1], "text": p.text()} for _ in range(burst))
        elif batch and batch[-1]["kind"] == "command.outputSnapshot" and burst:
            batch.extend({**batch[-1], "text": text} for text in ("a", "ab", "abc"))
        for delta_ in batch:
            if delta_["kind"] == "input.accepted":  # unique ids, so every accepted input can be followed
                creq += 1
                delta_["clientRequestId"] = "creq_" + _base32(creq)
        assert p.span <= 2 ** (8 * STEP_BYTES - 32), "a step's choices need more bytes than STEP_BYTES"
        stream.steps.append((thread, now, batch))
    return stream


def _base32(n: int) -> str:
    digits = ""
    for _ in range(10):
        n, r = divmod(n, 32)
        digits = CREQ_ALPHABET[r] + digits
    return digits


# -- running a stream ---------------------------------------------------------------------


@dataclass
class Run:
    assembler: Assembler
    steps: list[tuple[str, list[Event]]]  # (thread, events of that batch)

    def by_thread(self) -> dict[str, list[Event]]:
        out: dict[str, list[Event]] = defaultdict(list)
        for thread, events in self.steps:
            out[thread].extend(events)
        return out

    def all_events(self) -> list[Event]:
        return [event for _, events in self.steps for event in events]


def run(
    stream: Stream,
    flush_ms: float = 0,
    throttle_ms: float = 500,
    clock: bool = True,
    tail: Sequence[dict[str, Any]] = (),
) -> Run:
    """Feed every batch (validated) and then one final batch `tail` per thread, 1000 ms after the last step."""
    assembler = Assembler(PROVIDER, ENTROPY, progress_throttle_ms=throttle_ms, text_delta_flush_ms=flush_ms)
    steps = []
    for thread, now, batch in stream.steps:
        params = g.convert_params({"threadId": thread, "deltas": batch})
        steps.append((thread, assembler.assemble(thread, params.deltas, now if clock else 0)))
    final = g.convert_params({"threadId": "x", "deltas": list(tail)}).deltas
    for thread in stream.threads:
        steps.append((thread, assembler.assemble(thread, final, stream.end + 1000 if clock else 0)))
    return Run(assembler, steps)


def guarded(run_: Run) -> list[tuple[str, Event, Any]]:
    """(thread, event, violation) for every event, through one guard fed thread-stamped copies."""
    guard = Guard()
    out = []
    for thread, events in run_.steps:
        for event in events:
            out.append((thread, event, guard.observe({**event, "threadId": thread})))
    return out


def item_ids(event: Event) -> list[str]:
    """Item ids an event names: item.id, itemId, and every parentToolCallId."""
    ids = []
    item = event.get("item")
    if item is not None:
        ids.append(item["id"])
        if "parentToolCallId" in item:
            ids.append(item["parentToolCallId"])
    for key in ("itemId", "parentToolCallId"):
        if key in event:
            ids.append(event[key])
    return ids


def subject(event: Event) -> str | None:
    """The item an event is about (not its parent)."""
    item = event.get("item")
    return item["id"] if item is not None else event.get("itemId")


# Example counts come from the loaded profile (conftest.py): 100 in `make test`, 10^5 under `make soak`.
PROPS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

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


def params(*batch: dict[str, Any], thread: str = "thr_a") -> dict[str, Any]:
    return {"threadId": thread, "deltas": list(batch)}


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


# -- the guard ------------------------------------------------------------------------------

GUARD_TYPES = (
    "turn/started", "turn/completed", "item/started", "item/completed", "item/backgroundTask/completed",
    "item/delegation/completed", "item/agentMessage/delta", "item/commandExecution/outputDelta",
    "item/toolCall/progress", "item/backgroundTask/progress", "item/delegation/progress", "provider/error",
)  # fmt: skip


def guard_event(data: bytes) -> Event:
    p = Picks(data)
    kind = p.pick(GUARD_TYPES)
    ident = p.pick(("a", "b", "c"))
    event: Event = {"type": kind, "threadId": p.pick(("", "t2")), "providerThreadId": ""}
    if kind.startswith("turn/"):
        event["scope"] = {"kind": "turn", "turnId": ident} if p.index(6) else {"kind": "thread"}
    elif kind.endswith(("started", "completed")) or kind in (
        "item/backgroundTask/progress",
        "item/delegation/progress",
    ):
        event["scope"] = {"kind": "thread"}
        event["item"] = {"type": "x", "id": ident}
    elif kind.startswith("item/"):
        event["scope"] = {"kind": "turn", "turnId": "T"}
        event["itemId"] = ident
    else:
        event["scope"] = {"kind": "thread"}
    assert p.span <= 2 ** (8 * GUARD_EVENT_BYTES - 32)
    return event


GUARD_EVENT_BYTES = 6  # 8.8 bits of choices (type, id, thread, scope) and 32 spare, as for a stream's steps
GUARD_EVENTS = st.binary(min_size=GUARD_EVENT_BYTES, max_size=GUARD_EVENT_BYTES).map(guard_event)


@settings(max_examples=max(300, settings.default.max_examples), deadline=None)
@given(events=st.lists(GUARD_EVENTS, max_size=40))
def test_guard_violations_leave_state_untouched(events: list[Event]) -> None:
    """Dropping any one violating event changes no other verdict: a violation never changes state (§13)."""
    guard = Guard()
    verdicts = [guard.observe(event) for event in events]
    for k, verdict in enumerate(verdicts):
        if verdict is None:
            continue
        without = Guard()
        assert [without.observe(e) for e in events[:k] + events[k + 1 :]] == verdicts[:k] + verdicts[k + 1 :]


def test_guard_item_sets_are_bounded_to_512() -> None:
    guard = Guard()
    for n in range(513):
        assert guard.observe({"type": "item/started", "threadId": "", "item": {"id": f"i{n}"}}) is None
    delta = {"type": "item/plan/delta", "threadId": "", "itemId": "i0", "delta": "x"}
    assert guard.observe(delta) is not None  # the oldest open id was trimmed
    assert guard.observe({**delta, "itemId": "i1"}) is None
    for n in range(513):
        assert guard.observe({"type": "item/completed", "threadId": "", "item": {"id": f"s{n}"}}) is None
    assert guard.observe({"type": "item/completed", "threadId": "", "item": {"id": "s0"}}) is None  # forgotten
    assert guard.observe({"type": "item/completed", "threadId": "", "item": {"id": "s512"}}) is not None


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

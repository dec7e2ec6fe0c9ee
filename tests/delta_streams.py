"""Valid `thread/delta` streams for the property tests: the strategy, a run through the assembler and the
guard, and readings of the events.

The strategy generates VALID streams: several threads, a monotone clock whose gaps straddle the 100 ms / 500 ms
windows, keyed and unkeyed turns, accepted input, items of many shapes, streamed text and output, progress,
session.ended and session.reset. Every generated batch must pass the grammar.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from bbridge.core import grammar as g
from bbridge.core.assembler import Assembler
from bbridge.core.guard import Guard
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


def params(*batch: dict[str, Any], thread: str = "thr_a") -> dict[str, Any]:
    return {"threadId": thread, "deltas": list(batch)}

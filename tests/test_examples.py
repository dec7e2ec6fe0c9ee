"""The spec's worked examples (assembler.md §18, X01–X47) and host-grammar trace (§18.1, G01–G17).

Both are parsed from ../shared/spec/assembler.md at test time (never copied
into the repository) and replayed through the assembler / guard; outputs are
compared as serialized bytes. Without the shared spec these tests skip. A few
spec-independent guard checks at the end always run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import missing_reason, shared_path

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.events import encode_event
from bbridge.core.guard import RULES, Guard

SPEC_PARTS = ("spec", "assembler.md")

# -- parsing §18 ----------------------------------------------------------------

GETTERS = {
    "getBbItemId": "get_bb_item_id",
    "getProviderItemId": "get_provider_item_id",
    "getBbTurnId": "get_bb_turn_id",
    "getProviderTurnId": "get_provider_turn_id",
    "getOpenTurnId": "get_open_turn_id",
}

_HEADING = re.compile(r"^#### (X\d\d)\. (.+)$")
_STEP = re.compile(r"^@t=(\d+) in:$")
_GETTER = re.compile(r"^\?\s+(\w+)\((.*)\)\s+->\s+(.+)$")
_NOTE = re.compile(r"^\s*\(.*\)\s*$")  # trailing prose after an event, e.g. "(no providerThreadId key)"


@dataclass
class Assemble:
    now: int
    deltas: list[str] = field(default_factory=list)
    expected: list[dict[str, Any]] | None = None


@dataclass
class Getter:
    method: str
    args: list[Any]
    value: Any


@dataclass
class Example:
    xid: str
    title: str
    options: dict[str, str] = field(default_factory=dict)
    ops: list[Assemble | Getter] = field(default_factory=list)


def _load_object(text: str) -> dict[str, Any]:
    """One JSON object from the start of `text` (key order kept); only a parenthesized note may follow."""
    obj, end = json.JSONDecoder(object_pairs_hook=dict).raw_decode(text)
    rest = text[end:]
    if rest.strip() and not _NOTE.match(rest):
        raise ValueError(f"unexpected text after JSON: {rest!r}")
    assert isinstance(obj, dict)
    return obj


def _section_18(text: str) -> str:
    start = text.index("\n## 18.")
    end = text.index("\n### 18.1", start)
    return text[start:end]


def parse_examples(text: str) -> list[Example]:
    examples: list[Example] = []
    current: Example | None = None
    in_block = False
    mode: str | None = None  # "in" | "out"
    for raw in _section_18(text).split("\n"):
        heading = _HEADING.match(raw)
        if heading:
            current = Example(heading.group(1), heading.group(2))
            examples.append(current)
            in_block = False
            continue
        if current is None:
            continue
        if raw.startswith("```"):
            in_block = not in_block
            mode = None
            continue
        if not in_block:
            continue
        line = raw.strip()
        if not line:
            continue
        if line.startswith("options:"):
            current.options = dict(part.split("=", 1) for part in line[len("options:") :].split())
        elif step := _STEP.match(line):
            current.ops.append(Assemble(int(step.group(1))))
            mode = "in"
        elif line == "out: []":
            _last_step(current).expected = []
            mode = None
        elif line == "out:":
            _last_step(current).expected = []
            mode = "out"
        elif getter := _GETTER.match(line):
            args = json.loads("[" + getter.group(2) + "]")
            current.ops.append(Getter(getter.group(1), args, json.loads(getter.group(3))))
            mode = None
        elif mode == "in":
            _last_step(current).deltas.append(line)
        elif mode == "out":
            expected = _last_step(current).expected
            assert expected is not None
            expected.append(_load_object(line))
        else:
            raise ValueError(f"{current.xid}: unparsed line {line!r}")
    return examples


def _last_step(example: Example) -> Assemble:
    step = example.ops[-1]
    assert isinstance(step, Assemble), f"{example.xid}: out: without a preceding @t= block"
    return step


def unelide(event: dict[str, Any]) -> dict[str, Any]:
    """Re-insert the `"threadId":""` / `"providerThreadId":""` the examples leave out, right after `type`."""
    out: dict[str, Any] = {"type": event["type"], "threadId": event.get("threadId", "")}
    if "providerThreadId" in event:
        out["providerThreadId"] = event["providerThreadId"]  # thread/identity carries its own
    elif event["type"] != "thread/started":
        out["providerThreadId"] = ""
    for key, value in event.items():
        out.setdefault(key, value)
    return out


def dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _spec_text() -> str | None:
    path = shared_path(*SPEC_PARTS)
    return None if path is None else Path(path).read_text(encoding="utf-8")


_SPEC = _spec_text()
_EXAMPLES = parse_examples(_SPEC) if _SPEC is not None else []
_NO_SPEC = pytest.mark.skip(reason=missing_reason(*SPEC_PARTS))


def _example_params() -> list[Any]:
    if _SPEC is None:
        return [pytest.param(None, id="spec-missing", marks=_NO_SPEC)]
    return [pytest.param(example, id=example.xid) for example in _EXAMPLES]


# -- the examples -----------------------------------------------------------------


@pytest.mark.skipif(_SPEC is None, reason=missing_reason(*SPEC_PARTS))
def test_all_47_examples_parsed() -> None:
    ids = [example.xid for example in _EXAMPLES]
    assert ids == [f"X{n:02d}" for n in range(1, 48)]
    for example in _EXAMPLES:
        assert set(example.options) == {
            "providerId",
            "entropyPrefix",
            "textDeltaFlushMs",
            "progressThrottleMs",
            "thread",
        }, example.xid
        steps = [op for op in example.ops if isinstance(op, Assemble)]
        assert steps, example.xid
        assert all(step.deltas and step.expected is not None for step in steps), example.xid


def test_unelide_puts_ids_right_after_type() -> None:
    assert dump(unelide({"type": "turn/started", "scope": {"kind": "thread"}})) == (
        '{"type":"turn/started","threadId":"","providerThreadId":"","scope":{"kind":"thread"}}'
    )
    assert dump(unelide({"type": "thread/started", "scope": {"kind": "thread"}})) == (
        '{"type":"thread/started","threadId":"","scope":{"kind":"thread"}}'
    )
    assert dump(unelide({"type": "thread/identity", "providerThreadId": "p", "scope": {"kind": "thread"}})) == (
        '{"type":"thread/identity","threadId":"","providerThreadId":"p","scope":{"kind":"thread"}}'
    )


@pytest.mark.parametrize("example", _example_params())
def test_example(example: Example) -> None:
    opts = example.options
    assembler = Assembler(
        opts["providerId"],
        entropy_prefix=opts["entropyPrefix"],
        progress_throttle_ms=float(opts["progressThrottleMs"]),
        text_delta_flush_ms=float(opts["textDeltaFlushMs"]),
    )
    thread = opts["thread"]
    for number, op in enumerate(example.ops, 1):
        where = f"{example.xid} op {number}"
        if isinstance(op, Getter):
            method = getattr(assembler, GETTERS[op.method])
            assert method(*op.args) == op.value, f"{where}: {op.method}{tuple(op.args)}"
            continue
        body = '{"threadId":' + json.dumps(thread) + ',"deltas":[' + ",".join(op.deltas) + "]}"
        params = grammar.decode_params(body.encode())
        assert params.threadId == thread
        got = [encode_event(event).decode() for event in assembler.assemble(thread, params.deltas, op.now)]
        assert op.expected is not None
        want = [dump(unelide(event)) for event in op.expected]
        assert got == want, f"{where} (@t={op.now})"


# -- §18.1 host grammar trace ---------------------------------------------------------

_TRACE = re.compile(r"^(G\d\d) (\S+)\s+id=(\S+)\s+-> (ok|DROP (\S+): (.+))$")
_ITEM_CARRIERS = ("item/started", "item/completed", "item/backgroundTask/", "item/delegation/")


@dataclass
class TraceLine:
    gid: str
    event_type: str
    ident: str
    rule: str | None
    reason: str | None


def parse_trace(text: str) -> list[TraceLine]:
    start = text.index("\n### 18.1")
    end = text.index("\n## 19.", start)
    lines = []
    for raw in text[start:end].split("\n"):
        match = _TRACE.match(raw.strip())
        if match:
            lines.append(TraceLine(match[1], match[2], match[3], match[5], match[6]))
    return lines


def trace_event(event_type: str, ident: str) -> dict[str, Any]:
    """A minimal event of `event_type` whose turn or item id is `ident` (what the trace's id column names)."""
    event: dict[str, Any] = {"type": event_type, "threadId": "", "providerThreadId": ""}
    if event_type in ("turn/started", "turn/completed"):
        event["scope"] = {"kind": "turn", "turnId": ident}
    elif event_type.startswith(_ITEM_CARRIERS):
        event["scope"] = {"kind": "thread"}
        event["item"] = {"type": "toolCall", "id": ident}
    elif event_type.startswith("item/"):
        event["scope"] = {"kind": "turn", "turnId": "T"}
        event["itemId"] = ident
    else:
        event["scope"] = {"kind": "thread"}
        event["message"] = ident
    return event


@pytest.mark.skipif(_SPEC is None, reason=missing_reason(*SPEC_PARTS))
def test_guard_trace_g01_g17() -> None:
    assert _SPEC is not None
    trace = parse_trace(_SPEC)
    assert [line.gid for line in trace] == [f"G{n:02d}" for n in range(1, 18)]
    guard = Guard()
    got, want = [], []
    for line in trace:
        violation = guard.observe(trace_event(line.event_type, line.ident))
        got.append((line.gid, None if violation is None else (violation.rule, violation.reason)))
        want.append((line.gid, None if line.rule is None else (line.rule, line.reason)))
    assert got == want
    assert {line.rule for line in trace if line.rule} <= set(RULES)


# -- spec-independent guard checks (always run) ---------------------------------------


def _ev(event_type: str, thread: str = "", **extra: Any) -> dict[str, Any]:
    return {"type": event_type, "threadId": thread, "providerThreadId": "", **extra}


def _turn(turn: str) -> dict[str, str]:
    return {"kind": "turn", "turnId": turn}


def test_guard_rule_ids_are_exactly_the_five() -> None:
    assert set(RULES) == {
        "item/opens-before-delta",
        "item/settles-once",
        "turn/starts-once",
        "turn/settles-once",
        "turn/known",
    }


def test_guard_turn_rules_and_reasons() -> None:
    guard = Guard()
    assert guard.observe(_ev("turn/started", scope=_turn("t1"))) is None
    v = guard.observe(_ev("turn/started", scope=_turn("t1")))
    assert v is not None and v == ("turn/starts-once", 'turn/started for turn "t1", which is already open')
    assert guard.observe(_ev("turn/completed", scope=_turn("t1"), status="completed")) is None
    v = guard.observe(_ev("turn/completed", scope=_turn("t1"), status="completed"))
    assert v == ("turn/settles-once", 'turn/completed for turn "t1", which already completed')
    v = guard.observe(_ev("turn/started", scope=_turn("t1")))
    assert v == ("turn/starts-once", 'turn/started for turn "t1", which already completed')
    v = guard.observe(_ev("turn/completed", scope=_turn("zz"), status="completed"))
    assert v == ("turn/known", 'turn/completed for turn "zz", which never started')
    # thread-scoped turn events are never checked
    assert guard.observe(_ev("turn/completed", scope={"kind": "thread"}, status="completed")) is None


def test_guard_item_rules_and_state_untouched_by_violations() -> None:
    guard = Guard()
    v = guard.observe(_ev("item/plan/delta", scope=_turn("t"), itemId="i1", delta="x"))
    assert v == ("item/opens-before-delta", 'item/plan/delta for item "i1" arrived before item/started')
    assert guard.observe(_ev("item/started", scope=_turn("t"), item={"type": "plan", "id": "i1"})) is None
    assert guard.observe(_ev("item/plan/delta", scope=_turn("t"), itemId="i1", delta="x")) is None
    assert guard.observe(_ev("item/completed", scope=_turn("t"), item={"type": "plan", "id": "i1"})) is None
    v = guard.observe(_ev("item/backgroundTask/completed", scope={"kind": "thread"}, item={"id": "i1"}))
    assert v == ("item/settles-once", 'item/backgroundTask/completed for item "i1", which already settled')
    v = guard.observe(_ev("item/delegation/progress", scope={"kind": "thread"}, item={"id": "i1"}))
    assert v == ("item/opens-before-delta", 'item/delegation/progress for item "i1" arrived before item/started')
    # completing an item that never opened is allowed; a reopen re-admits a settled id
    assert guard.observe(_ev("item/completed", scope=_turn("t"), item={"id": "i2"})) is None
    assert guard.observe(_ev("item/started", scope=_turn("t"), item={"id": "i1"})) is None
    assert guard.observe(_ev("item/completed", scope=_turn("t"), item={"id": "i1"})) is None


def test_guard_state_is_per_thread_and_clearable() -> None:
    guard = Guard()
    assert guard.observe(_ev("turn/started", "a", scope=_turn("t1"))) is None
    assert guard.observe(_ev("turn/started", "b", scope=_turn("t1"))) is None  # another thread
    assert guard.observe(_ev("turn/started", "a", scope=_turn("t1"))) is not None
    guard.clear_thread("a")
    assert guard.observe(_ev("turn/started", "a", scope=_turn("t1"))) is None
    assert guard.observe(_ev("turn/started", "b", scope=_turn("t1"))) is not None
    guard.clear()
    assert guard.observe(_ev("turn/started", "b", scope=_turn("t1"))) is None


def test_guard_passes_other_event_types() -> None:
    guard = Guard()
    for event_type in ("provider/error", "thread/name/updated", "turn/input/accepted", "thread/compacted"):
        assert guard.observe(_ev(event_type, scope={"kind": "thread"})) is None

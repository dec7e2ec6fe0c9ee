"""Exported JSON Schemas: generated from the msgspec types, and deciding like the grammar and the reference.

The acceptance tests (issue 4 item 6) run `thread-delta.schema.json` through
the `jsonschema` library over every recorded `thread/delta` and every step of
the synthetic golden cases.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from bbridge.cli import main
from bbridge.core import grammar
from bbridge.core.events import EVENT_TYPES
from bbridge.replay.parity import read_cases
from bbridge.wire import protocol, schema
from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, RUNTIME_TO_BRIDGE, find_cells, lane_path, read_lane

Validator = jsonschema.Draft202012Validator
PRESENTATION = {"label": {"pending": "Working", "completed": "Done"}, "icon": {"glyph": "Sparkles"}}
CREQ = "creq_2222222223"


@pytest.fixture(scope="module")
def docs() -> dict[str, schema.Schema]:
    return {name: build() for name, build in schema.SCHEMAS.items()}


@pytest.fixture(scope="module")
def deltas(docs: dict[str, schema.Schema]) -> Validator:
    return Validator(docs["thread-delta.schema.json"])


def sub(doc: schema.Schema, node: schema.Schema) -> Validator:
    """A validator for one node of a document (sharing its `$defs`)."""
    return Validator({**node, "$defs": doc["$defs"]})


def grammar_accepts(params: Any) -> bool:
    try:
        grammar.decode_params(json.dumps(params, ensure_ascii=False))
    except grammar.GrammarError:
        return False
    return True


def agree(deltas: Validator, *items: Any, thread: Any = "thr_1") -> bool:
    """The schema's verdict on a notification, asserted equal to the grammar's."""
    params = {"threadId": thread, "deltas": list(items)}
    verdict = deltas.is_valid(params)
    assert verdict == grammar_accepts(params), params
    return verdict


# -- the documents ---------------------------------------------------------------------


def test_every_document_is_a_valid_2020_12_schema(docs: dict[str, schema.Schema]) -> None:
    assert set(docs) >= {"thread-delta.schema.json", "events.schema.json", "runtime-requests.schema.json"}
    for doc in docs.values():
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Validator.check_schema(doc)


def test_write_schemas_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    assert [Path(p).name for p in printed] == [*schema.SCHEMAS, "openrpc.json"]  # the client API's OpenRPC last
    for name, build in schema.SCHEMAS.items():
        assert json.loads((tmp_path / "out" / name).read_text(encoding="utf-8")) == build()


def test_delta_schema_is_generated_from_the_grammar_types(docs: dict[str, schema.Schema]) -> None:
    defs = docs["thread-delta.schema.json"]["$defs"]
    union = defs["ThreadDeltaParams"]["properties"]["deltas"]["items"]
    assert list(union["discriminator"]["mapping"]) == list(grammar.DELTA_KINDS)
    assert len(union["anyOf"]) == 26
    shapes = defs["ItemOpen"]["properties"]["item"]["discriminator"]["mapping"]
    assert len(shapes) == 16
    _, raw = msgspec.json.schema_components([grammar.ThreadDeltaParams], ref_template="#/$defs/{name}")
    changed = {name for name, node in schema.ecma_patterns(raw).items() if defs[name] != node}
    assert changed == {"Presentation", "ItemOpen", "ItemClose"}  # the `__post_init__` rules; the rest is msgspec's


def test_safe_integers_and_patterns_are_ecma(docs: dict[str, schema.Schema]) -> None:
    text = json.dumps(docs)
    assert r"\\Z" not in text and r"\\A" not in text
    window = docs["thread-delta.schema.json"]["$defs"]["RateLimitWindow"]["properties"]["resetsAtMs"]["anyOf"][0]
    assert window == {"type": "integer", "minimum": 0, "maximum": 2**53 - 1}


# -- constraints msgspec cannot state (post-processed) ---------------------------------


@pytest.mark.parametrize(
    ("crid", "ok"),
    [(CREQ, True), (CREQ + "\n", False), ("x" + CREQ, False), (CREQ + "2", False), ("creq_222222222l", False)],
)
def test_client_request_id_is_matched_whole(deltas: Validator, crid: str, ok: bool) -> None:
    assert agree(deltas, {"kind": "input.accepted", "clientRequestId": crid}) is ok


@pytest.mark.parametrize(
    ("ext", "ok"), [("codex/goal", True), ("codex/goal\n", False), ("codex/goal/x", False), ("Codex/goal", False)]
)
def test_extension_kind_is_matched_whole(deltas: Validator, ext: str, ok: bool) -> None:
    assert agree(deltas, {"kind": "extension.state", "extensionKind": ext, "payload": None}) is ok


@pytest.mark.parametrize(("part", "ok"), [("a", True), ("a\n", True), ("\n", True), ("", False), ("a\x1fb", False)])
def test_key_parts(deltas: Validator, part: str, ok: bool) -> None:
    assert agree(deltas, {"kind": "item.textDelta", "key": {"channel": part}, "channel": "plan", "text": ""}) is ok
    assert agree(deltas, {"kind": "turn.open", "providerTurnId": part}) is ok


SMILE = "\U0001f600"


@pytest.mark.parametrize(
    "detail",
    [
        "x" * 280,
        "x" * 281,
        "é" * 280,
        SMILE * 140,
        SMILE * 141,
        SMILE * 139 + "xx",
        SMILE * 139 + "xxx",
        "x" * 279 + SMILE,
        "x" * 278 + SMILE,
        SMILE + "x" * 278,
        SMILE + "x" * 279,
        "x" * 140 + SMILE * 70,
        "x" * 141 + SMILE * 70,
        SMILE * 200,
    ],
)
def test_detail_is_limited_in_utf16_units(deltas: Validator, detail: str) -> None:
    item = {"kind": "item.open", "key": {}, "item": {"type": "plan", "text": ""}}
    verdict = agree(deltas, {**item, "presentation": {**PRESENTATION, "detail": detail}})
    assert verdict is (grammar.utf16_len(detail) <= schema.DETAIL_MAX_UTF16)


def test_utf16_pattern_for_other_limits() -> None:
    for limit in (0, 1, 2, 3, 7):
        pattern = re.compile(schema.utf16_max_length_pattern(limit))
        for text in ("", "a", "ab", SMILE, "a" + SMILE, SMILE * 2, "abc" + SMILE, SMILE * 4, "a" * 8):
            assert bool(pattern.search(text)) is (grammar.utf16_len(text) <= limit), (limit, text)


@pytest.mark.parametrize("kind", ["item.open", "item.close"])
def test_extension_items_need_a_presentation(deltas: Validator, kind: str) -> None:
    base = {"kind": kind, "key": {"providerItemId": "i"}, "status": "completed"}
    ext = {"type": "extension", "kind": "echo/note", "payload": {"n": 1}}
    assert not agree(deltas, {**base, "item": ext})
    assert agree(deltas, {**base, "item": ext, "presentation": PRESENTATION})
    assert agree(deltas, {**base, "item": {"type": "plan", "text": "x"}})


def test_ecma_engines_agree_with_python(docs: dict[str, schema.Schema]) -> None:
    """Every pattern decides alike under Python `re.search` and ECMA-262 with and without the `u` flag."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: ECMA-262 regex semantics not checked")
    patterns = sorted({m for m in re.findall(r'"pattern": ("(?:[^"\\]|\\.)*")', json.dumps(docs))})
    texts = ["", "a", "\n", "a\n", "a\x1f", CREQ, CREQ + "\n", "a/b", "a/b\n", "x" * 281, SMILE * 140, SMILE * 141]
    texts += ["x" * 279 + SMILE, "x" * 278 + SMILE, " ", " x", "Z", "creq_Z"]
    script = (
        "const d = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(d.p.map(p => [new RegExp(p, 'u'), new RegExp(p)].map("
        "r => d.t.map(t => r.test(t))))));"
    )
    data = json.dumps({"p": [json.loads(p) for p in patterns], "t": texts})
    out = json.loads(
        subprocess.run([node, "-e", script], input=data, capture_output=True, text=True, check=True).stdout
    )
    for pattern, (unicode, legacy) in zip((json.loads(p) for p in patterns), out, strict=True):
        python = [bool(re.search(pattern, t)) for t in texts]
        assert unicode == python == legacy, pattern


# -- acceptance: recordings and golden cases -------------------------------------------


def test_every_recorded_thread_delta_decides_like_the_grammar(recordings_root: Path, deltas: Validator) -> None:
    verdicts: dict[bool, int] = {True: 0, False: 0}
    for cell in find_cells(recordings_root):
        for current in (False, True):
            lane = lane_path(cell, BRIDGE_TO_RUNTIME, current)
            for entry in read_lane(lane, BRIDGE_TO_RUNTIME) if lane.exists() else []:
                message = json.loads(entry.line)
                if message.get("method") == "thread/delta":
                    verdict = deltas.is_valid(message["params"])
                    assert verdict == grammar_accepts(message["params"]), (cell, entry.seq)
                    verdicts[verdict] += 1
    assert verdicts[True] > 1000 and verdicts[False] > 0  # the v2 lanes are rejected by both


def test_golden_cases_decide_like_the_reference(cases_path: Path, deltas: Validator) -> None:
    steps = rejected = 0
    for case in read_cases(cases_path):
        for step, expected in zip(case["steps"], case["expected"], strict=True):
            verdict = deltas.is_valid({"threadId": step["threadId"], "deltas": step["deltas"]})
            assert verdict is not expected.get("rejected", False), (case["id"], steps)
            steps, rejected = steps + 1, rejected + (not verdict)
    assert (steps, rejected) == (25_848, 1156)


# -- events ------------------------------------------------------------------------------


def test_events_schema_covers_the_catalogue(docs: dict[str, schema.Schema]) -> None:
    doc = docs["events.schema.json"]
    assert list(doc["discriminator"]["mapping"]) == list(EVENT_TYPES)
    for name, ref in doc["discriminator"]["mapping"].items():
        node = doc["$defs"][ref.rsplit("/", 1)[1]]
        assert node["properties"]["type"] == {"enum": [name]}
        assert {"type", "threadId", "scope"} <= set(node["required"])
    items = doc["$defs"]["ItemStartedEvent"]["properties"]["item"]["discriminator"]["mapping"]
    assert len(items) == 16
    wire = docs["thread-delta.schema.json"]["$defs"]  # enums the event schema restates must match the wire's
    assert (
        doc["$defs"]["ProviderWarningEvent"]["properties"]["category"]
        == wire["ProviderWarning"]["properties"]["category"]
    )
    assert (
        doc["$defs"]["ModelFallbackEvent"]["properties"]["reason"]
        == wire["ProviderModelFallback"]["properties"]["reason"]
    )


def test_golden_events_are_schema_valid(cases_path: Path, docs: dict[str, schema.Schema]) -> None:
    """Every golden event is valid: the whole schema for the first of each type, its `type` branch for all."""
    doc = docs["events.schema.json"]
    whole = Validator(doc)
    branches = {name: sub(doc, {"$ref": ref}) for name, ref in doc["discriminator"]["mapping"].items()}
    count, seen = 0, set()
    for case in read_cases(cases_path):
        for expected in case["expected"]:
            for event in expected.get("events", []):
                assert branches[event["type"]].is_valid(event), event
                if event["type"] not in seen:
                    seen.add(event["type"])
                    assert whole.is_valid(event), event
                count += 1
    assert count > 20_000 and seen == set(EVENT_TYPES)


TURN = {"kind": "turn", "turnId": "t-1"}
STARTED = {"type": "turn/started", "threadId": "", "providerThreadId": "", "scope": TURN}


@pytest.mark.parametrize(
    ("event", "ok"),
    [
        (STARTED, True),
        ({**STARTED, "scope": {"kind": "thread"}}, False),  # turn-scoped type
        ({**STARTED, "scope": {"kind": "turn"}}, False),
        ({"type": "thread/started", "threadId": "", "scope": {"kind": "thread"}}, True),
        ({"type": "thread/name/updated", "threadId": "", "scope": {"kind": "thread"}, "threadName": "n"}, False),
        ({**STARTED, "type": "turn/completed", "status": "done"}, False),
        ({**STARTED, "type": "item/started", "item": {"type": "plan", "id": "i", "text": ""}}, True),
        ({**STARTED, "type": "item/started", "item": {"type": "extension", "id": "i", "kind": "a/b", "payload": 1, "status": "pending"}}, False),
        ({**STARTED, "type": "item/commandExecution/outputDelta", "itemId": "i", "delta": "", "reset": False}, False),
        ({**STARTED, "type": "provider/warning", "scope": {"kind": "thread"}, "category": "general"}, True),
        ({**STARTED, "type": "system/error"}, False),
    ],
)  # fmt: skip
def test_event_constraints(docs: dict[str, schema.Schema], event: dict[str, Any], ok: bool) -> None:
    assert Validator(docs["events.schema.json"]).is_valid(event) is ok


# -- handshake and requests ----------------------------------------------------------------


def test_handshake_schemas(docs: dict[str, schema.Schema]) -> None:
    params = Validator(docs["initialize-params.schema.json"])
    assert params.is_valid(
        {"protocolVersion": 2, "client": {"name": "bb", "version": "1.0.0"}, "grammarVersions": [3, 3]}
    )
    assert not params.is_valid({"protocolVersion": 2, "client": {"name": "", "version": "1"}})
    result = Validator(docs["initialize-result.schema.json"])
    assert result.is_valid({"protocolVersion": 2, "capabilities": None, "extra": 1})
    assert not result.is_valid({"protocolVersion": 2, "capabilities": {"fork": "sideways"}})
    caps = docs["initialize-result.schema.json"]["$defs"]["Capabilities"]["properties"]
    assert caps["grammarVersions"]["default"] == [2, 2] and caps["fork"]["default"] == "none"


def recorded_messages(root: Path) -> list[tuple[str, dict[str, Any]]]:
    messages = []
    for cell in find_cells(root):
        for direction in (RUNTIME_TO_BRIDGE, BRIDGE_TO_RUNTIME):
            lane = lane_path(cell, direction, current=direction == BRIDGE_TO_RUNTIME)
            lane = lane if lane.exists() else lane_path(cell, direction)
            if lane.exists():
                messages += [(direction, json.loads(e.line)) for e in read_lane(lane, direction)]
    return messages


def test_recorded_requests_and_bridge_messages_are_schema_valid(
    recordings_root: Path, docs: dict[str, schema.Schema]
) -> None:
    validators = {
        RUNTIME_TO_BRIDGE: Validator(docs["runtime-requests.schema.json"]),
        BRIDGE_TO_RUNTIME: Validator(docs["bridge-messages.schema.json"]),
    }
    methods = set()
    for direction, message in recorded_messages(recordings_root):
        if "method" in message:
            assert validators[direction].is_valid(message), message
            methods.add(message["method"])
    assert {"thread/start", "turn/start", "thread/delta", "interaction/request", "item/tool/call"} <= methods


@pytest.mark.parametrize(
    ("message", "ok"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "thread/stop", "params": {}}, False),
        ({"jsonrpc": "2.0", "id": 1, "method": "thread/explode", "params": {}}, False),
        ({"jsonrpc": "2.0", "method": "model/list", "params": {}}, False),  # a request needs an id
        ({"jsonrpc": "2.0", "id": 1, "method": "model/list", "params": {}}, True),
    ],
)
def test_runtime_request_schema(docs: dict[str, schema.Schema], message: dict[str, Any], ok: bool) -> None:
    assert Validator(docs["runtime-requests.schema.json"]).is_valid(message) is ok


def test_user_questions_allow_free_text_or_offer_an_option(docs: dict[str, schema.Schema]) -> None:
    messages = Validator(docs["bridge-messages.schema.json"])
    question = {"id": "q", "prompt": "Tabs?", "multiSelect": False, "allowFreeText": False}
    for extra, ok in (({}, False), ({"options": []}, False), ({"options": [{"value": "t", "label": "T"}]}, True)):
        payload = {"kind": "user_question", "questions": [{**question, **extra}]}
        params = {"providerThreadId": "p", "turnId": None, "payload": payload}
        request = {"jsonrpc": "2.0", "id": 1, "method": "interaction/request", "params": params}
        assert messages.is_valid(request) is ok
        try:
            protocol.decode_method_params("interaction/request", json.dumps(params))
        except protocol.InvalidParams:
            assert not ok
        else:
            assert ok


def test_bridge_message_schema_ignores_unknown_notifications(docs: dict[str, schema.Schema]) -> None:
    messages = Validator(docs["bridge-messages.schema.json"])
    assert messages.is_valid({"jsonrpc": "2.0", "method": "thread/openWork", "params": {"open": True}})
    assert not messages.is_valid({"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": "", "deltas": []}})
    assert not messages.is_valid({"jsonrpc": "2.0", "method": "item/tool/call", "params": {"providerThreadId": "p"}})


@pytest.mark.parametrize(
    ("method", "result", "ok"),
    [
        ("provider/health", {"supported": False}, True),
        ("provider/health", {"supported": True}, False),
        ("thread/goal/clear", {"cleared": False}, True),
        ("thread/goal/clear", {"cleared": False, "more": 1}, False),
        ("thread/start", {"providerThreadId": "p", "sessionRestorable": True}, True),
        ("model/list", {"models": [], "selectedOnlyModels": []}, True),
    ],
)
def test_results_map_decides_like_the_types(docs: dict[str, schema.Schema], method: str, result: Any, ok: bool) -> None:
    doc = docs["runtime-requests.schema.json"]
    assert sub(doc, doc["x-results"][method]).is_valid(result) is ok
    try:
        protocol.decode_method_result(method, json.dumps(result))
    except ValueError:
        assert not ok
    else:
        assert ok

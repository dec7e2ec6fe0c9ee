"""Bridge protocol types: handshake checks, negotiation, capability gating, method params (protocol.md §2-§3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge.wire import protocol as p
from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, RUNTIME_TO_BRIDGE, LaneEntry, find_cells, lane_path, read_lane
from tests.support import FULL

MALFORMED = (
    'Provider bridge "codex" answered initialize with a malformed result ({issues}). The bridge and this runtime '
    'cannot negotiate a handshake; update or fix the "codex" provider plugin.'
)
WRONG_VERSION = (
    'Provider bridge "codex" speaks Provider Bridge Protocol version {v}, but this runtime requires version 2. '
    'Update the "codex" provider plugin to a build published for protocol version 2.'
)
NO_OVERLAP = (
    'Provider bridge "codex" speaks thread/delta grammar versions {b}, but this runtime assembles versions 3-3. '
    'Update the "codex" provider plugin or bb so the two ranges overlap.'
)


def refusal(result: Any) -> str:
    with pytest.raises(p.HandshakeRefused) as caught:
        p.check_initialize("codex", json.dumps(result).encode())
    return str(caught.value)


# -- handshake -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "bridge", "expected"),
    [
        ((3, 3), (3, 3), 3),
        ((3, 3), (2, 2), None),
        ((3, 3), (4, 5), None),
        ((3, 3), (1, 3), 3),
        ((3, 3), (3, 9), 3),
        ((2, 4), (3, 5), 4),
        ((2, 4), (1, 3), 3),
        ((1, 5), (2, 3), 3),
        ((2, 2), (3, 3), None),
    ],
)
def test_negotiate_takes_the_highest_common_version(
    runtime: tuple[int, int], bridge: tuple[int, int], expected: int | None
) -> None:
    assert p.negotiate(runtime, bridge) == expected


def test_capability_defaults_are_a_definite_no() -> None:
    caps = p.Capabilities()
    assert msgspec.structs.asdict(caps) == {
        "sessionRestore": False,
        "threadArchive": False,
        "threadRename": False,
        "threadGoalClear": False,
        "fork": "none",
        "approvalEnforcedBy": "runtime",
        "grammarVersions": (2, 2),
        "steerMode": "queue",
    }
    assert msgspec.json.decode(b'{"someFutureCapability": true}', type=p.Capabilities) == caps


@pytest.mark.parametrize("capabilities", [{}, None, "absent"])
def test_missing_or_null_capabilities_read_as_defaults(capabilities: Any) -> None:
    result: dict[str, Any] = {"protocolVersion": 2}
    if capabilities != "absent":
        result["capabilities"] = capabilities
    # Defaults include grammar [2, 2], so such a bridge is refused on the grammar check.
    assert refusal(result) == NO_OVERLAP.format(b="2-2")


def test_first_party_handshake_is_accepted_with_unknown_fields() -> None:
    codex = {
        "sessionRestore": True,
        "threadArchive": True,
        "threadRename": True,
        "threadGoalClear": True,
        "fork": "checkpoint",
        "approvalEnforcedBy": "runtime",
        "grammarVersions": [3, 3],
        "steerMode": "inject",
        "notYetInvented": {"x": 1},
    }
    raw = json.dumps({"protocolVersion": 2, "capabilities": codex, "ok": True}).encode()
    caps = p.check_initialize("codex", raw)
    assert caps.fork == "checkpoint" and caps.threadGoalClear and caps.grammarVersions == (3, 3)
    assert caps.steerMode == "inject"


def test_echo_handshake_defaults_everything_but_grammar() -> None:
    caps = p.check_initialize("echo", b'{"protocolVersion":2,"capabilities":{"grammarVersions":[3,3]}}')
    assert caps == p.Capabilities(grammarVersions=(3, 3))


def test_wider_bridge_range_negotiates() -> None:
    caps = p.check_initialize("codex", b'{"protocolVersion":2,"capabilities":{"grammarVersions":[2,4]}}')
    assert caps.grammarVersions == (2, 4)


@pytest.mark.parametrize(
    ("result", "issues"),
    [
        ({"protocolVersion": "2"}, "protocolVersion: Expected `int`, got `str`"),
        ({"capabilities": {}}, "Object missing required field `protocolVersion`"),
        ({"protocolVersion": 0}, "protocolVersion: Expected `int` >= 1"),
        ({"protocolVersion": 2, "capabilities": {"fork": "sideways"}}, "capabilities.fork: Invalid enum value 'sideways'"),
        ({"protocolVersion": 2, "capabilities": {"threadArchive": None}}, "capabilities.threadArchive: Expected `bool`, got `null`"),
        ({"protocolVersion": 2, "capabilities": {"grammarVersions": [3, "3"]}}, "capabilities.grammarVersions.1: Expected `int`, got `str`"),
        ({"protocolVersion": 2, "capabilities": {"grammarVersions": [3]}}, "capabilities.grammarVersions: Expected `array` of length 2"),
        ({"protocolVersion": 2, "capabilities": {"grammarVersions": [4, 3]}}, "capabilities: grammar range must be [min, max] with min <= max"),
        ([2], "Expected `object`, got `array`"),
    ],
)  # fmt: skip
def test_malformed_result_is_refused_with_its_issue(result: Any, issues: str) -> None:
    assert refusal(result) == MALFORMED.format(issues=issues)


def test_non_json_result_is_malformed() -> None:
    with pytest.raises(p.HandshakeRefused, match=r"malformed result \(Input data was truncated\)"):
        p.check_initialize("codex", b'{"protocolVersion":')


@pytest.mark.parametrize("version", [1, 3])
def test_other_protocol_version_is_refused(version: int) -> None:
    result = {"protocolVersion": version, "capabilities": {"grammarVersions": [3, 3]}}
    assert refusal(result) == WRONG_VERSION.format(v=version)


def test_protocol_version_is_checked_before_grammar() -> None:
    assert refusal({"protocolVersion": 1}) == WRONG_VERSION.format(v=1)


@pytest.mark.parametrize(("bridge", "shown"), [([2, 2], "2-2"), ([4, 7], "4-7"), ([1, 2], "1-2")])
def test_grammar_without_overlap_is_refused(bridge: list[int], shown: str) -> None:
    assert refusal({"protocolVersion": 2, "capabilities": {"grammarVersions": bridge}}) == NO_OVERLAP.format(b=shown)


def test_handshake_refused_is_a_value_error() -> None:
    assert issubclass(p.HandshakeRefused, ValueError)


def test_initialize_params_grammar_range() -> None:
    params = p.decode_method_params("initialize", b'{"protocolVersion":2,"client":{"name":"bb","version":"1.0.0"}}')
    assert params.grammarVersions is msgspec.UNSET  # a bridge reads [2, 2] (LEGACY_GRAMMAR_RANGE)
    for bad in (b'"grammarVersions":[3,2]', b'"grammarVersions":[0,3]', b'"client":{"name":"","version":"1"}'):
        raw = b'{"protocolVersion":2,"client":{"name":"bb","version":"1"},' + bad + b"}"
        with pytest.raises(p.InvalidParams):
            p.decode_method_params("initialize", raw)


# -- capability gating ------------------------------------------------------------------

ALL = p.Capabilities(threadArchive=True, threadRename=True, threadGoalClear=True, fork="checkpoint")


@pytest.mark.parametrize(
    ("method", "caps", "reason"),
    [
        ("thread/name/set", p.Capabilities(), "threadRename not advertised"),
        ("thread/archive", p.Capabilities(), "threadArchive not advertised"),
        ("thread/unarchive", p.Capabilities(threadRename=True), "threadArchive not advertised"),
        ("thread/goal/clear", p.Capabilities(), "threadGoalClear not advertised"),
        ("thread/fork", p.Capabilities(), "fork not advertised"),
        ("thread/fork", p.Capabilities(fork="tip"), None),
        ("thread/name/set", ALL, None),
        ("thread/archive", ALL, None),
        ("thread/unarchive", ALL, None),
        ("thread/goal/clear", ALL, None),
        ("thread/fork", ALL, None),
        ("thread/start", p.Capabilities(), None),
        ("thread/resume", p.Capabilities(), None),
        ("turn/steer", p.Capabilities(), None),
        ("provider/health", p.Capabilities(), None),
        ("skills/configure", p.Capabilities(), None),
    ],
)
def test_method_gating(method: str, caps: p.Capabilities, reason: str | None) -> None:
    assert p.method_allowed(method, caps) == reason


def test_checkpoint_fork_needs_checkpoint_capability() -> None:
    assert p.method_allowed("thread/fork", p.Capabilities(fork="tip"), checkpoint=True) is not None
    assert p.method_allowed("thread/fork", p.Capabilities(fork="checkpoint"), checkpoint=True) is None


def test_gated_methods_are_runtime_requests_and_name_real_capabilities() -> None:
    assert set(p.METHOD_CAPABILITY) <= set(p.RUNTIME_REQUESTS)
    assert set(p.METHOD_CAPABILITY.values()) <= set(p.Capabilities.__struct_fields__)


def test_runtime_request_table_has_the_18_bridge_request_methods() -> None:
    assert len(p.RUNTIME_REQUESTS) == 18 and next(iter(p.RUNTIME_REQUESTS)) == "initialize"


# -- method params and results ---------------------------------------------------------


def test_conformance_kit_requests_parse() -> None:
    start = {"threadId": "thr_conformance_1", "cwd": "/w", "options": FULL, "instructionMode": "append"}
    assert isinstance(p.decode_method_params("thread/start", json.dumps(start)).options, p.FullOptions)
    turn = {
        "threadId": "thr_conformance_1",
        "providerThreadId": "p1",
        "input": [{"type": "text", "text": "hi"}],
        "clientRequestId": "creq_2222222223",
        "options": FULL,
    }
    parsed = p.decode_method_params("turn/start", json.dumps(turn))
    assert parsed.input[0].mentions == []  # default applied at parse time


@pytest.mark.parametrize(
    "options",
    [
        {**FULL, "permissionScope": "workspace"},
        {**FULL, "permissionMode": "auto"},
        {"permissionMode": "accept-edits", "permissionScope": "workspace", "approvalReviewer": "automatic", "permissionEscalation": "ask"},
        {**FULL, "serviceTier": "turbo"},
    ],
)  # fmt: skip
def test_permission_policy_is_one_of_three_exact_combinations(options: dict[str, Any]) -> None:
    start = {"threadId": "t", "cwd": "/w", "options": options}
    with pytest.raises(p.InvalidParams):
        p.decode_method_params("thread/start", json.dumps(start))


def test_invalid_params_carry_issues() -> None:
    with pytest.raises(p.InvalidParams) as caught:
        p.decode_method_params("thread/stop", b"{}")
    assert str(caught.value) == "Invalid params for thread/stop"
    assert caught.value.issues == [{"path": [], "message": "Object missing required field `threadId`"}]
    bad_turn = {"threadId": "t", "providerThreadId": "p", "input": [{"type": "text", "text": 1}], "clientRequestId": "creq_2222222223", "options": FULL}  # fmt: skip
    with pytest.raises(p.InvalidParams) as caught:
        p.decode_method_params("turn/start", json.dumps(bad_turn))
    assert caught.value.issues == [{"path": ["input", 0, "text"], "message": "Expected `str`, got `int`"}]


@pytest.mark.parametrize(
    ("method", "result", "ok"),
    [
        ("provider/health", {"supported": False}, True),
        ("provider/health", {"supported": True}, False),
        ("provider/usage", {"supported": True, "usage": {"status": "expired"}}, True),
        ("provider/usage", {"supported": True, "usage": {"status": "error", "message": "boom"}}, True),
        ("provider/usage", {"supported": True, "usage": {"status": "ok", "accountEmail": None, "planLabel": None, "windows": [{"label": "5h", "usedPercent": 101, "resetsAt": None}]}}, False),
        ("provider/installation/run", {"available": False, "message": "stale"}, True),
        ("provider/installation/run", {"available": True, "command": {"command": "npm", "args": ["i"], "displayCommand": "npm i"}, "verification": {"kind": "version_at_least", "version": "2"}}, True),
        ("thread/goal/clear", {"cleared": True}, True),
        ("thread/goal/clear", {"cleared": True, "extra": 1}, False),
        ("thread/stop", {"ok": True}, True),
        ("thread/stop", {"providerCheckpointId": ""}, False),
        ("model/list", {"models": []}, True),
        ("thread/start", {"sessionRestorable": True}, False),
    ],
)  # fmt: skip
def test_results(method: str, result: Any, ok: bool) -> None:
    if ok:
        p.decode_method_result(method, json.dumps(result))
        return
    with pytest.raises(ValueError, match=f"^Invalid JSON-RPC result for {method}$"):
        p.decode_method_result(method, json.dumps(result))


def test_model_list_defaults_selected_only_models() -> None:
    assert p.decode_method_result("model/list", b'{"models":[]}') == p.ModelListResult(models=[])


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"providerThreadId": "p1", "thread": {"id": "x"}}, "p1"),
        ({"providerThreadId": None, "thread": {"id": "x"}}, "x"),
        ({"providerThreadId": "", "threadId": "other"}, "other"),
        ({"threadId": "thr_1"}, None),
        ({"thread": None}, None),
        ([], None),
    ],
)
def test_lenient_identity_resolution(result: Any, expected: str | None) -> None:
    assert p.resolve_provider_thread_id(result, "thr_1") == expected


def test_user_question_rules() -> None:
    def payload(*questions: dict[str, Any]) -> bytes:
        req = {
            "providerThreadId": "p",
            "turnId": None,
            "payload": {"kind": "user_question", "questions": list(questions)},
        }
        return json.dumps(req).encode()

    ok = {"id": "q1", "prompt": "Tabs?", "multiSelect": False, "allowFreeText": True}
    p.decode_method_params("interaction/request", payload(ok))
    for bad in (
        payload(ok, ok),  # duplicate ids
        payload({**ok, "allowFreeText": False}),  # neither free text nor options
        payload({**ok, "prompt": "  "}),  # blank prompt
        payload({**ok, "options": [{"value": "a", "label": "A"}, {"value": "a", "label": "B"}]}),
        payload(),
    ):
        with pytest.raises(p.InvalidParams):
            p.decode_method_params("interaction/request", bad)


# -- recordings ------------------------------------------------------------------------


def runtime_lanes(cell: Path) -> Iterator[tuple[bool, list[LaneEntry]]]:
    """The runtime lanes of a cell in wire order, once with each `bridge→runtime` lane (plain, then `.current`)."""
    requests = lane_path(cell, RUNTIME_TO_BRIDGE)
    sent = read_lane(requests, RUNTIME_TO_BRIDGE) if requests.exists() else []
    for current in (False, True):
        lane = lane_path(cell, BRIDGE_TO_RUNTIME, current)
        if lane.exists():
            yield current, sorted(sent + read_lane(lane, BRIDGE_TO_RUNTIME), key=lambda e: (e.run, e.seq))


def recorded(root: Path, *, current: bool | None = None) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """Every runtime-lane message: direction, message, and for a response the method it answers.

    `current` picks the lanes: True only `.current` ones, False only the recorded ones, None both.
    """
    for cell in find_cells(root):
        for is_current, entries in runtime_lanes(cell):
            if current is not None and is_current != current:
                continue
            asked: dict[tuple[str, float, Any], str] = {}
            for entry in entries:
                message = json.loads(entry.line)
                if "method" in message and "id" in message:
                    asked[(entry.dir, entry.run, message["id"])] = message["method"]
                answers = None
                if "method" not in message:
                    other = RUNTIME_TO_BRIDGE if entry.dir == BRIDGE_TO_RUNTIME else BRIDGE_TO_RUNTIME
                    answers = asked.get((other, entry.run, message.get("id")))
                yield entry.dir, message, answers


def test_recorded_initialize_results_are_refused_for_lacking_grammar(recordings_root: Path) -> None:
    """Recorded (v2-era) lanes predate `grammarVersions`: they read [2, 2], which grammar v3 refuses."""
    results = [m["result"] for d, m, asked in recorded(recordings_root, current=False) if asked == "initialize"]
    assert len(results) >= 3
    for result in results:
        assert "grammarVersions" not in result.get("capabilities", {})
        caps = msgspec.json.decode(json.dumps(result), type=p.InitializeResult).capabilities
        assert isinstance(caps, p.Capabilities) and caps.grammarVersions == (2, 2)
        assert refusal(result) == NO_OVERLAP.format(b="2-2")
        ok = {**result, "capabilities": {**result["capabilities"], "grammarVersions": [3, 3]}}
        assert p.check_initialize("codex", json.dumps(ok).encode()).grammarVersions == (3, 3)


def test_current_lanes_initialize_results_are_accepted(recordings_root: Path) -> None:
    """A `.current` lane is what today's reference bridge writes: it may carry `grammarVersions`; if so, v3 is in it."""
    results = [m["result"] for d, m, asked in recorded(recordings_root, current=True) if asked == "initialize"]
    carrying = [r for r in results if "grammarVersions" in r.get("capabilities", {})]
    for result in carrying:
        assert p.check_initialize("pi", json.dumps(result).encode()).grammarVersions[1] >= 3
    if (recordings_root / "pi" / "model-list").is_dir():
        assert carrying, "the pi model-list cell's current lane answers initialize with grammarVersions"


def test_recorded_requests_notifications_and_results_parse(recordings_root: Path) -> None:
    seen: set[str] = set()
    for direction, message, answers in recorded(recordings_root):
        method = message.get("method")
        if method is not None:
            known = direction == RUNTIME_TO_BRIDGE or method in p.BRIDGE_REQUESTS or method in p.BRIDGE_NOTIFICATIONS
            if known and method != "thread/delta":  # v2 lanes: the grammar's own tests cover deltas
                p.decode_method_params(method, json.dumps(message["params"]))
                seen.add(method)
        elif answers is not None and "result" in message:
            p.decode_method_result(answers, json.dumps(message["result"]))
            seen.add(f"{answers} result")
    assert {"initialize", "thread/start", "turn/start", "thread/stop", "thread/identity"} <= seen
    assert {"interaction/request", "item/tool/call", "model/list result", "item/tool/call result"} <= seen

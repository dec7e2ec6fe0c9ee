"""A forwarded request's params are decoded once (`methods.viewed`) and never changed: what the bridge receives is
built from them and the daemon's own changes (`methods.outgoing`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from msgspec import UNSET

from bbridge.daemon.methods import Call, outgoing, viewed
from bbridge.wire import rpc


class _Client:
    name = "test"


def _call(method: str, params: dict[str, Any]) -> Call:
    return Call(_Client(), method, params, viewed(method, params))  # type: ignore[arg-type]


def test_a_construction_loses_only_what_the_daemon_reads_and_gains_its_changes() -> None:
    params: dict[str, Any] = {
        "providerId": "echo",
        "threadId": "thr_1",
        "cwd": "/w",
        "options": {"permissionMode": "full", "tools": {"include": ["shout"]}, "x-bridge": 1},
        "dynamicTools": [{"name": "mine", "description": "d", "inputSchema": {}}],
        "unknownToTheDaemon": {"kept": True},
    }
    before = copy.deepcopy(params)
    call = _call("thread/start", params)
    assert call.thread_id == "thr_1" and call.cwd == "/w"
    assert call.choice is not None and call.choice.include == ["shout"]
    call.added_tools.append({"name": "shout", "description": "d", "inputSchema": {}})
    call.options["instructions"] = "Be brief."
    sent = outgoing(call, keeps_provider_id=False, turn_field=None)
    assert params == before  # the client's dict is never changed
    assert "providerId" not in sent and sent["unknownToTheDaemon"] == {"kept": True}
    assert sent["options"] == {"permissionMode": "full", "x-bridge": 1, "instructions": "Be brief."}
    assert [tool["name"] for tool in sent["dynamicTools"]] == ["mine", "shout"]


def test_a_turn_id_and_the_provider_thread_are_filled_into_the_copy() -> None:
    params: dict[str, Any] = {"threadId": "thr_1", "expectedTurnId": "turn_bb", "input": [], "options": {}}
    call = _call("turn/steer", params)
    call.provider_thread_id, call.provider_turn_id = "prov-1", "turn-prov"
    sent = outgoing(call, keeps_provider_id=False, turn_field="expectedTurnId")
    assert sent["providerThreadId"] == "prov-1" and sent["expectedTurnId"] == "turn-prov"
    assert params["expectedTurnId"] == "turn_bb" and "providerThreadId" not in params
    assert sent["options"] == {}  # nothing the daemon reads was there: the options pass as they are


def test_maintenance_keeps_its_provider_id() -> None:
    call = _call("provider/health", {"providerId": "codex"})
    assert outgoing(call, keeps_provider_id=True, turn_field=None) == {"providerId": "codex"}


@pytest.mark.parametrize(
    ("params", "phrase"),
    [
        ({"threadId": 7}, "thread/start: Expected `str`, got `int` - at `$.threadId`"),
        ({"providerId": ""}, "at `$.providerId`"),
        ({"options": {"tools": {"include": "shout"}}}, "Invalid options.tools"),
        ({"options": []}, "at `$.options`"),
    ],
)
def test_a_malformed_member_the_daemon_reads_is_the_clients_error_naming_it(
    params: dict[str, Any], phrase: str
) -> None:
    with pytest.raises(rpc.RpcError) as refused:
        viewed("thread/start", params)
    assert refused.value.code == rpc.INVALID_PARAMS and phrase in refused.value.message


def test_a_constructions_hidden_mark_is_read_by_the_daemon_and_never_sent() -> None:
    params: dict[str, Any] = {"threadId": "thr_1", "hidden": {"runId": "prun_1", "role": "expert"}, "options": {}}
    call = _call("thread/fork", params)
    assert call.view.hidden is not UNSET and call.view.hidden.role == "expert"
    assert outgoing(call, keeps_provider_id=False, turn_field=None) == {"threadId": "thr_1", "options": {}}
    assert "hidden" in params  # the client's dict is never changed

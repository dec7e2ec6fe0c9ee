"""The sans-IO JSON-RPC parts, without trio: messages and ids (`bbridge.wire.jsonrpc`), a read's lines classified
and our requests correlated (`bbridge.wire.peer`), a read of typed notifications decoded whole (`bbridge.wire.delta_decoder`).
The trio `Connection` over them is tests/test_rpc_*.py."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from bbridge.core import scalars
from bbridge.wire.delta_decoder import TypedDecoder
from bbridge.wire.framing import Overflow
from bbridge.wire.jsonrpc import (
    BRIDGE_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    Notification,
    Request,
    RpcError,
    encode_bridge_request,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    mend_surrogates,
    recover_id,
)
from bbridge.wire.peer import Calls, Inbound, Junk, Mended, Response

# -- messages and ids ------------------------------------------------------------


def test_encoders_write_each_member_order() -> None:
    assert encode_request("m", {}, 1) == b'{"jsonrpc":"2.0","method":"m","params":{},"id":1}'
    assert encode_request("m", None, "a") == b'{"jsonrpc":"2.0","method":"m","id":"a"}'
    assert encode_bridge_request("m", {"x": 1}, 2) == b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"x":1}}'
    assert encode_notification("n") == b'{"jsonrpc":"2.0","method":"n"}'
    assert encode_notification("n", [1]) == b'{"jsonrpc":"2.0","method":"n","params":[1]}'
    assert encode_result(3, None) == b'{"jsonrpc":"2.0","id":3,"result":null}'
    assert encode_error(4, RpcError(-1, "no")) == b'{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}'
    assert encode_error(4, RpcError(-1, "no", {"d": 1})).endswith(b'"message":"no","data":{"d":1}}}')


def test_lone_surrogates_are_mended_only_when_that_is_the_fault() -> None:
    assert mend_surrogates(b'{"a":"\\udc00"}') == '{"a":"\ufffd"}'.encode()
    assert mend_surrogates(b'{"a":') is None and mend_surrogates(b'{"a":"\\u00e9"}') is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"a\xff"}', 7),
        (b' {"id" : "abc", "x": 1}', "abc"),
        (b'{"id":-1.5e3}', -1500.0),
        (b'{"id":"a\\"b"}', 'a"b'),
        (b'{"params":{"id":3},"id":4}', None),  # only before anything nested opens
        (b'[{"id":1}]', None),
        (b'{"id":null,"method":"m"}', None),
        (b'{"id":true}', None),
        (b"not json", None),
    ],
)
def test_recover_id_reads_only_a_top_level_id(line: bytes, expected: object) -> None:
    assert recover_id(line) == expected


# -- a read's lines, classified ----------------------------------------------------


def _shape(events: list[Any]) -> list[Any]:
    return [[n.method for n in event] if isinstance(event, list) else event for event in events]


def test_a_read_is_classified_in_wire_order_and_notifications_are_batched() -> None:
    lines: list[bytes | Overflow] = [
        b'{"method":"a"}',
        b'{"method":"b","id":null}',  # a null id is no id
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}',
        b'{"id":2,"result":{"ok":true}}',
        b'{"method":"c"}',
        b"   ",  # blank: skipped
        b"not json",
        b"[1]",
        b'{"id":5,"method":7}',
        b'{"id":null,"method":7}',
        Overflow(100, b'{"id":9'),
        b'{"method":"d"}',
    ]
    events = Inbound(max_line=64).receive(lines)
    parse = events[3]
    assert isinstance(parse, Junk) and parse.code == PARSE_ERROR and parse.message.startswith("Parse error: ")
    assert _shape(events) == [
        ["a", "b"],
        Request(1, "m", msgspec.Raw(b"[1]")),
        Response(2, msgspec.Raw(b'{"ok":true}'), msgspec.Raw()),
        parse,  # junk is reported as it is read; it does not end a batch
        Junk(b"[1]", "not a JSON object"),
        Junk(b'{"id":5,"method":7}', "not a JSON-RPC message", INVALID_REQUEST, "Invalid Request", 5),
        Junk(b'{"id":null,"method":7}', "not a JSON-RPC message", None, "Invalid Request", None),
        Junk(
            b'{"id":9',
            "discarded an oversized JSON-RPC line (100 bytes, limit 64)",
            INVALID_REQUEST,
            "Invalid Request: discarded an oversized JSON-RPC line (100 bytes, limit 64)",
        ),
        ["c", "d"],
    ]


def test_a_mended_line_is_its_own_batch_between_the_others() -> None:
    line = b'{"method":"b","params":"x\\ud83dy"}'
    events = Inbound().receive([b'{"method":"a"}', line, b'{"method":"c"}'])
    assert _shape(events) == [["a"], Mended(len(line)), ["b"], ["c"]]
    assert msgspec.json.decode(events[2][0].params) == "x\ufffdy"


class _Point(msgspec.Struct):
    x: int


def test_typed_notifications_are_decoded_in_the_classifying_pass_and_a_whole_read_in_one_call() -> None:
    inbound = Inbound(TypedDecoder("point", _Point, screen=scalars.ESCAPED_SEPARATOR.search))
    typed = [b'{"method":"point","params":{"x":1}}', b'{"method":"point","params":{"x":2}}']
    whole = inbound.typed_read(typed)
    assert whole is not None and [(n.method, n.params, n.decoded) for n in whole] == [
        ("point", None, _Point(1)),
        ("point", None, _Point(2)),
    ]
    assert inbound.typed_whole(b"".join(line + b"\n" for line in typed)) == whole  # a read of whole lines, as is
    odd_ids = [
        b'{"id":%s,"method":"point","params":{"x":4}}' % value for value in (b"null", b"true", b"[1]", b'{"a":1}')
    ]
    assert [n.decoded for n in inbound.typed_read([*typed, *odd_ids]) or []] == [_Point(n) for n in (1, 2, 4, 4, 4, 4)]
    for odd in (
        b'{"id":3,"method":"point","params":{"x":3}}',
        b'{"id":"3","method":"point","params":{"x":3}}',
        b'{"id":3.5,"method":"point","params":{"x":3}}',
        b'{"method":"point","params":{"x":"\\u001f"}}',
    ):
        assert inbound.typed_read([*typed, odd]) is None  # a request, or a line the screen sends on
    assert inbound.typed_read(typed[:1]) is None and inbound.typed_read([]) is None  # the line path's
    (alone,) = inbound.receive(typed[:1])
    assert [n.decoded for n in alone] == [_Point(1)]
    (batch,) = inbound.receive([typed[0], b'{"method":"point","params":{"x":"no"}}'])
    assert [(n.params, n.decoded) for n in batch] == [(None, _Point(1)), (msgspec.Raw(b'{"x":"no"}'), None)]
    assert Inbound().typed_read(typed) is None


# -- our requests and their answers ------------------------------------------------


def test_calls_mint_ids_and_settle_each_once() -> None:
    woken: list[str] = []
    calls = Calls("peer")
    first, one = calls.open(None, lambda: woken.append("one"))
    second, two = calls.open(None, lambda: woken.append("two"))
    named, three = calls.open("x", lambda: woken.append("three"))
    assert (first, second, named) == (1, 2, "x")
    with pytest.raises(ValueError, match="already outstanding on 'peer'"):
        calls.open("x", lambda: None)
    assert calls.answer(Response(1.0, msgspec.Raw(b"[1]"), msgspec.Raw())) is one  # 1.0 answers id 1
    assert (one.done, one.result, one.error) == (True, msgspec.Raw(b"[1]"), None)
    assert calls.answer(Response(1, msgspec.Raw(b"[2]"), msgspec.Raw())) is None  # answered already: ignored
    error = calls.answer(Response(2, msgspec.Raw(), msgspec.Raw(b'{"code":-5,"message":"no"}')))
    assert error is two and two.error is not None and (two.error.code, two.error.message) == (-5, "no")
    assert two.result == msgspec.Raw(b"null")
    calls.close("x", three)  # timed out: a late answer is ignored
    assert calls.answer(Response("x", msgspec.Raw(b"1"), msgspec.Raw())) is None and not three.done
    assert woken == ["one", "two"]


def test_fail_all_settles_every_outstanding_call() -> None:
    calls = Calls("peer")
    _, one = calls.open(None, lambda: None)
    _, two = calls.open(None, lambda: None)
    failure = RpcError(BRIDGE_ERROR, "gone")
    calls.fail_all(failure)
    assert one.error is failure and two.error is failure and one.done and two.done
    assert calls.answer(Response(1, msgspec.Raw(b"1"), msgspec.Raw())) is None


def test_a_notification_carries_its_decoded_params() -> None:
    assert Notification("m", None, 1).decoded == 1 and Notification("m", msgspec.Raw(b"1")).decoded is None

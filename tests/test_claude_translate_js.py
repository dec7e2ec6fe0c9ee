"""The Claude Code bridge's JavaScript semantics (spec §8.3): trims, UTF-16 cuts, numbers, `JSON.parse` and
`JSON.stringify` round trips, what reaches the wire as JavaScript wrote it.

The recorded cells prove the translator's common path byte for byte (`test_translate_parity.py`); the
test_claude_translate_*.py files pin the code-only rules, spec §10.1.
"""

from __future__ import annotations

import msgspec
import pytest

from bbridge.core import grammar as g
from bbridge.core import js
from bridges.claude_code import child
from bridges.claude_code import presentation as p
from bridges.claude_code.translate import Translator, delta_params
from tests.claude_messages import CREQ, THREAD, out

# -- JavaScript semantics (§8.3) ---------------------------------------------------


def test_js_trim_uses_the_ecmascript_whitespace_set() -> None:
    assert js.trim("\ufeff a \u3000") == "a"
    assert js.trim("\x85a\x1c") == "\x85a\x1c"


def test_cuts_count_utf16_units_and_keep_a_lone_high_surrogate() -> None:
    assert js.cut("a😀b", 2) == "a\ud83d"
    assert js.limit("x" * 161, 160) == "x" * 159 + "…"
    assert js.limit("x" * 160, 160) == "x" * 160


def test_title_is_the_trimmed_first_line() -> None:
    assert p.title("  cat a\r\nmore ") == "cat a"
    assert p.title(" \n second") == "second"
    assert p.title(" \t ") is None
    assert p.title("é" * 200) == "é" * 159 + "…"


def test_numbers_print_as_javascript_does() -> None:
    assert js.number_text(3.0) == "3" and js.number_text(2.5) == "2.5"
    assert js.number_text(1e21) == "1e+21" and js.number_text(float("-inf")) == "-Infinity"
    assert js.parse('{"a":1.0,"b":[2.50]}') == {"a": 1, "b": [2.5]}


# JSON text → `JSON.stringify(JSON.parse(text))`, as Node 20 prints it (A§16.1, spec §8.1)
JS_ROUND_TRIPS = {
    "1e21": "1e+21",
    "1.5e300": "1.5e+300",
    "1e-7": "1e-7",
    "1.5e-5": "0.000015",
    "123e-20": "1.23e-18",
    "1e20": "100000000000000000000",
    "-0": "0",
    "1E400": "null",
    "5e-324": "5e-324",
    "9007199254740993": "9007199254740992",
    "[-9007199254740993]": "[-9007199254740992]",
    "12345678901234567890123": "1.2345678901234568e+22",
    r'"\ud800x"': r'"\ud800x"',
    r'"\udc00\ud83d\ude00"': '"\\udc00😀"',
    '"\\u007f\\u2028\\u0001/"': '"\x7f\u2028\\u0001/"',
    '{"b":1,"a":2,"b":3}': '{"b":3,"a":2}',
    '{"b":1,"10":2,"2":3,"01":4,"4294967295":5,"4294967294":6}': '{"2":3,"10":2,"4294967294":6,"b":1,"01":4,"4294967295":5}',
    r'{"x":"\ud800","10":1,"2":2}': r'{"2":2,"10":1,"x":"\ud800"}',
}


@pytest.mark.parametrize(("text", "expected"), JS_ROUND_TRIPS.items())
def test_parse_then_stringify_is_javascripts_round_trip(text: str, expected: str) -> None:
    assert js.stringify(js.parse(text)) == expected
    assert js.stringify(js.parse(text.encode("utf-8", "surrogatepass"))) == expected


@pytest.mark.parametrize("text", ["this is { not json", "NaN", "[Infinity]", '{"a":1', '"\\ud800'])
def test_parse_refuses_what_json_parse_refuses(text: str) -> None:
    with pytest.raises(msgspec.DecodeError):
        js.parse(text)


def test_raw_sdk_messages_reach_the_wire_as_javascript_wrote_them() -> None:
    """The child's line → the raw payload of an `unhandled` delta: member order, number spellings and a lone
    surrogate survive exactly (§4.3); msgspec alone would print `1e21`, keep 2^53+1 and fail on the surrogate."""
    t = Translator(THREAD, "claude-opus-5[1m]")
    t.input_accepted(CREQ)
    line = rb'{"type":"brand_new","n":1e21,"big":9007199254740993,"s":"a\ud800","2":1,"1":0}'
    wire = delta_params(THREAD, t.message(js.parse(line)))
    assert b'"message":{"1":0,"2":1,"type":"brand_new","n":1e+21,"big":9007199254740992,"s":"a\\ud800"}' in wire


def test_child_lines_are_written_as_javascript_would() -> None:
    """Tool inputs go back to the CLI verbatim (`updatedInput`), so child lines follow §8.1 too."""
    assert child.encode({"input": {"x": 1e21, "s": "\ud800/é"}}) == '{"input":{"x":1e+21,"s":"\\ud800/é"}}\n'.encode()


def test_presentation_writes_suppress_before_the_title() -> None:
    delta = g.ItemOpen(
        key=g.ItemKey(providerItemId="t1"), item=g.ToolShape(tool="x"), presentation=p.builtin("TaskGet", {})
    )
    shown = out([delta])[0]["presentation"]
    assert list(shown) == ["label", "icon", "suppress"]
    with_title = out([delta.__class__(key=delta.key, item=delta.item, presentation=p.builtin("LS", {"path": "/a"}))])
    assert list(with_title[0]["presentation"]) == ["label", "icon", "title"]
    ordered = p.builtin("ToolSearch", {"query": "q"})
    encoded = out([g.ItemOpen(key=g.ItemKey(providerItemId="t"), item=g.ToolShape(tool="t"), presentation=ordered)])
    assert list(encoded[0]["presentation"]) == ["label", "icon", "suppress", "title"]

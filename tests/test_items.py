"""Item helpers: the §3.6 diff builder, JS whitespace (§16.3), cumulative snapshots (§8.7)."""

from __future__ import annotations

import msgspec
import pytest

from bbridge.core import grammar as g
from bbridge.core.assembler import diff_cumulative_text, item_key
from bbridge.core.items import edit_diff, file_changes, is_js_blank

# -- edit_diff ----------------------------------------------------------------------


def test_spec_example() -> None:
    assert edit_diff("/tmp/a.ts", "one\ntwo\nthree\n", "one\n2\nthree\nfour\n") == (
        "--- a/tmp/a.ts\n+++ b/tmp/a.ts\n-two\n+2\n+four\n"
    )


def test_add_only() -> None:
    assert edit_diff("a.txt", None, "x\ny\n") == "--- /dev/null\n+++ b/a.txt\n+x\n+y\n"
    assert edit_diff("a.txt", None, "x\ny") == "--- /dev/null\n+++ b/a.txt\n+x\n+y\n"
    # an empty new file still yields the headers (non-empty, so it is emitted)
    assert edit_diff("a.txt", None, "") == "--- /dev/null\n+++ b/a.txt\n"
    # only one trailing empty line is dropped
    assert edit_diff("a.txt", None, "\n\n") == "--- /dev/null\n+++ b/a.txt\n+\n+\n"


@pytest.mark.parametrize(
    ("old", "new"),
    [("same\n", "same\n"), ("a\nb", "a\nb\n"), ("a\r\nb\r\n", "a\nb\n"), ("a\rb", "a\nb"), ("", "")],
)
def test_identical_texts_give_none(old: str, new: str) -> None:
    assert edit_diff("f", old, new) is None


def test_one_side_empty() -> None:
    assert edit_diff("f", "", "x\n") == "--- a/f\n+++ b/f\n+x\n"
    assert edit_diff("f", "x\ny\n", "") == "--- a/f\n+++ b/f\n-x\n-y\n"
    # "" has no lines, "\n" has one empty line
    assert edit_diff("f", "", "\n") == "--- a/f\n+++ b/f\n+\n"


def test_crlf_and_cr_normalization() -> None:
    assert edit_diff("f", "a\r\nb\rc\n", "a\nB\nc") == "--- a/f\n+++ b/f\n-b\n+B\n"
    # "\r\n" is one break, not two; a lone "\r" is one break
    assert edit_diff("f", None, "x\r\n\ry\r") == "--- /dev/null\n+++ b/f\n+x\n+\n+y\n"


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/tmp/a.ts", "tmp/a.ts"),
        ("\\tmp\\a.txt", "tmp/a.txt"),
        ("///abs//x", "abs//x"),
        ("/\\mixed\\p/q", "mixed/p/q"),
        ("C:\\repo\\x.py", "C:/repo/x.py"),
        ("rel/x", "rel/x"),
    ],
)
def test_path_normalization(path: str, shown: str) -> None:
    assert edit_diff(path, None, "x") == f"--- /dev/null\n+++ b/{shown}\n+x\n"
    assert edit_diff(path, "x", "y") == f"--- a/{shown}\n+++ b/{shown}\n-x\n+y\n"


def test_common_prefix_and_suffix_are_stripped_without_overlap() -> None:
    assert edit_diff("f", "a\na\n", "a\n") == "--- a/f\n+++ b/f\n-a\n"
    assert edit_diff("f", "a\n", "a\na\na\n") == "--- a/f\n+++ b/f\n+a\n+a\n"
    assert edit_diff("f", "h\nx\nt\n", "h\ny\nz\nt\n") == "--- a/f\n+++ b/f\n-x\n+y\n+z\n"


def test_lcs_ties_prefer_removal() -> None:
    assert edit_diff("f", "x\ny\n", "y\nx\n") == "--- a/f\n+++ b/f\n-x\n+x\n"
    assert edit_diff("f", "a\nb\nc\n", "c\nb\na\n") == "--- a/f\n+++ b/f\n-a\n-b\n+b\n+a\n"
    assert edit_diff("f", "1\n2\n3\n4\n", "1\nx\n3\ny\n") == "--- a/f\n+++ b/f\n-2\n+x\n-4\n+y\n"


def _middle(n: int) -> tuple[str, str]:
    """Old/new texts whose differing middle is n lines each (first and last lines differ)."""
    common = [f"c{i}" for i in range(n - 2)]
    return "\n".join(["A", *common, "B"]), "\n".join(["C", *common, "D"])


def test_lcs_used_up_to_one_million_cells() -> None:
    old, new = _middle(999)  # (999 + 1) * (999 + 1) == 1_000_000: still the LCS
    assert edit_diff("f", old, new) == "--- a/f\n+++ b/f\n-A\n+C\n-B\n+D\n"


def test_fallback_above_one_million_cells() -> None:
    old, new = _middle(1000)  # 1001 * 1001 > 1_000_000: all removes, then all adds
    common = [f"c{i}" for i in range(998)]
    body = ["-A", *("-" + c for c in common), "-B", "+C", *("+" + c for c in common), "+D"]
    assert edit_diff("f", old, new) == "\n".join(["--- a/f", "+++ b/f", *body]) + "\n"


def _changes(*entries: dict[str, str]) -> list[dict[str, str]]:
    return file_changes([msgspec.convert(entry, g.FileChangeEntry) for entry in entries])


def test_file_changes_diff_sources() -> None:
    assert _changes(
        {"path": "a", "kind": "update", "diff": "given", "oldText": "x", "newText": "y"},  # diff key wins
        {"path": "b", "kind": "update", "diff": "", "newText": "y"},  # empty diff dropped, no fallback
        {"path": "c", "kind": "delete", "oldText": "gone\n"},  # oldText alone never diffs
        {"path": "d", "kind": "update", "oldText": "s\n", "newText": "s\n"},  # identical: no diff key
        {"path": "e", "kind": "update", "movePath": "f", "newText": "n"},
    ) == [
        {"path": "a", "kind": "update", "diff": "given"},
        {"path": "b", "kind": "update"},
        {"path": "c", "kind": "delete"},
        {"path": "d", "kind": "update"},
        {"path": "e", "kind": "update", "movePath": "f", "diff": "--- /dev/null\n+++ b/e\n+n\n"},
    ]


# -- is_js_blank (ECMAScript trim set, not Python's strip) --------------------------------

JS_WHITESPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


@pytest.mark.parametrize("ch", list(JS_WHITESPACE), ids=[f"U+{ord(c):04X}" for c in JS_WHITESPACE])
def test_js_whitespace_is_blank(ch: str) -> None:
    assert is_js_blank(ch)
    assert is_js_blank(ch * 3 + " ")
    assert not is_js_blank(ch + "x")


def test_feff_is_blank_although_python_keeps_it() -> None:
    assert "\ufeff".strip() == "\ufeff"
    assert is_js_blank("\ufeff")


@pytest.mark.parametrize(
    "ch", ["\x1c", "\x1d", "\x1e", "\x1f", "\x85"], ids=["U+001C", "U+001D", "U+001E", "U+001F", "U+0085"]
)
def test_python_only_whitespace_is_not_blank(ch: str) -> None:
    assert ch.strip() == ""
    assert not is_js_blank(ch)
    assert not is_js_blank(" " + ch + "\n")


@pytest.mark.parametrize("ch", ["\u200b", "\u180e", "\x00", "x"])
def test_other_characters_are_not_blank(ch: str) -> None:
    assert not is_js_blank(ch)


def test_empty_string_is_blank() -> None:
    assert is_js_blank("")


# -- diff_cumulative_text (§8.7) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("next_text", "previous", "result"),
    [
        ("", None, None),
        ("", "abc", None),
        ("abc", "abc", None),
        ("abc", None, ("abc", "abc", False)),
        ("abc", "", ("abc", "abc", False)),
        ("abcdef", "abc", ("def", "abcdef", False)),
        ("FIRST\nSECOND\n", "FIRST\n", ("SECOND\n", "FIRST\nSECOND\n", False)),
        ("RESET\n", "FIRST\n", ("RESET\n", "RESET\n", True)),
        ("ab", "abc", ("ab", "ab", True)),  # shrinking is a restart
        ("\U0001f600b", "\U0001f600", ("b", "\U0001f600b", False)),
    ],
)
def test_diff_cumulative_text(next_text: str, previous: str | None, result: tuple[str, str, bool] | None) -> None:
    assert diff_cumulative_text(next_text, previous) == result


def test_diff_cumulative_text_default_previous() -> None:
    assert diff_cumulative_text("x") == ("x", "x", False)


# -- K(key) ---------------------------------------------------------------------------------


def test_item_key_joins_parts_with_unit_separator() -> None:
    assert item_key(g.ItemKey()) == "\x1f\x1f"
    assert item_key(g.ItemKey(providerItemId="a", channel="b", parentRef="c")) == "a\x1fb\x1fc"
    assert item_key(g.ItemKey(channel="b")) == "\x1fb\x1f"
    assert item_key(g.ItemKey(parentRef="c")) != item_key(g.ItemKey(providerItemId="c"))

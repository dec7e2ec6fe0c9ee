"""`[[tool_rules]]` and session grants (bbridge.toolhost.policy)."""

from __future__ import annotations

from typing import Any

import pytest

from bbridge.daemon.config import Refusal
from bbridge.toolhost.policy import MATCH_CHARS, Policies, compile_pattern, load_rules, resolve


def _policies(*tables: dict[str, Any]) -> Policies:
    rules, refused = load_rules(list(tables))
    assert refused == []
    return Policies(rules)


def test_a_glob_rule_decides_for_the_tools_it_names() -> None:
    policies = _policies({"tool": "grep_*", "decision": "allow"})
    assert policies.decide("t", "grep_repo", "ask", "f", {}).decision == "allow"
    assert policies.decide("t", "GREP_repo", "ask", "f", {}).decision == "ask"  # case-sensitive
    verdict = policies.decide("t", "other", "ask", "f", {})
    assert verdict.decision == "ask" and verdict.by == "the tool's policy (f)"


def test_conditions_all_match_by_pointer_and_regex() -> None:
    policies = _policies(
        {
            "tool": "*",
            "decision": "deny",
            "when": [{"pointer": "/q", "matches": "^-"}, {"pointer": "/opts/0/a~1b", "matches": "yes"}],
        }
    )
    both = {"q": "-rf", "opts": [{"a/b": "yes"}]}
    assert policies.decide("t", "x", "allow", "f", both).decision == "deny"
    assert policies.decide("t", "x", "allow", "f", {**both, "q": "rf"}).decision == "allow"
    assert policies.decide("t", "x", "allow", "f", {"q": "-rf"}).decision == "allow"  # a missing value: no match


def test_non_string_values_are_matched_as_json_text() -> None:
    policies = _policies({"tool": "*", "decision": "ask", "when": [{"pointer": "/n", "matches": "^5$"}]})
    assert policies.decide("t", "x", "allow", "f", {"n": 5}).decision == "ask"


def test_deny_beats_ask_beats_allow_and_the_strictest_is_named() -> None:
    policies = _policies(
        {"tool": "*", "decision": "allow"},
        {"tool": "x*", "decision": "ask"},
        {"tool": "xy", "decision": "deny"},
    )
    assert policies.decide("t", "a", "ask", "f", {}).decision == "allow"
    assert policies.decide("t", "xa", "allow", "f", {}).decision == "ask"
    verdict = policies.decide("t", "xy", "allow", "f", {})
    assert verdict.decision == "deny" and verdict.by.startswith("tool_rules[2]")


def test_a_tool_declared_deny_stays_denied_whatever_a_rule_says() -> None:
    policies = _policies({"tool": "*", "decision": "allow"})
    assert policies.decide("t", "x", "deny", "f", {}).decision == "deny"


def test_a_session_grant_lifts_an_ask_on_that_thread_only_never_a_deny() -> None:
    policies = _policies({"tool": "x", "decision": "deny", "when": [{"pointer": "/q", "matches": "bad"}]})
    policies.grant("t1", "x")
    assert policies.decide("t1", "x", "ask", "f", {"q": "ok"}).decision == "allow"
    assert policies.decide("t2", "x", "ask", "f", {"q": "ok"}).decision == "ask"
    assert policies.decide("t1", "x", "ask", "f", {"q": "bad"}).decision == "deny"
    policies.forget("t1")
    assert policies.decide("t1", "x", "ask", "f", {"q": "ok"}).decision == "ask"


def test_an_oversized_value_is_not_searched_and_can_only_make_a_call_stricter() -> None:
    huge = "a" * (MATCH_CHARS + 1)
    deny = _policies({"tool": "*", "decision": "deny", "when": [{"pointer": "/q", "matches": "^b"}]})
    assert deny.decide("t", "x", "allow", "f", {"q": huge}).decision == "deny"
    allow = _policies({"tool": "*", "decision": "allow", "when": [{"pointer": "/q", "matches": "a"}]})
    assert allow.decide("t", "x", "ask", "f", {"q": huge}).decision == "ask"


@pytest.mark.parametrize(
    ("table", "refusal"),
    [
        ({"tool": "x", "decision": "maybe"}, Refusal("tool_rules[0]", None, "Invalid enum value 'maybe'")),
        ({"tool": "x", "decision": "deny", "extra": 1}, Refusal("tool_rules[0]", None, "Object contains unknown")),
        (
            {"tool": "x", "decision": "deny", "when": [{"pointer": "q", "matches": "a"}]},
            Refusal("tool_rules[0]", "when[0]", "pointer 'q': a JSON pointer"),
        ),
        (
            {"tool": "x", "decision": "deny", "when": [{"pointer": "/q", "matches": "("}]},
            Refusal("tool_rules[0]", "when[0]", "not a regular expression"),
        ),
        (
            {"tool": "x", "decision": "deny", "when": [{"pointer": "/q", "matches": "(a+)+$"}]},
            Refusal("tool_rules[0]", "when[0]", "a repetition inside a repetition"),
        ),
    ],
)
def test_a_bad_rule_is_refused_with_its_reason(table: dict[str, Any], refusal: Refusal) -> None:
    rules, [refused] = load_rules([table, {"tool": "ok", "decision": "allow"}])
    assert [rule.tool for rule in rules] == ["ok"]
    assert (refused.section, refused.key) == (refusal.section, refusal.key)
    assert refused.error.startswith(refusal.error)


def test_tool_rules_must_be_an_array_of_tables() -> None:
    assert load_rules({"tool": "x"}) == (
        [],
        [Refusal("tool_rules", None, "expected an array of tables ([[tool_rules]])")],
    )


@pytest.mark.parametrize("pattern", [r"(a|aa)+", r"(\w+)\1", r"(.*a){3}", r"(?:x+y?)*z"])
def test_patterns_that_can_backtrack_exponentially_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="exponential"):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", [r"^-", r"rm\s+-rf", r"(?:ab)+c", r"(?:foo|bar)\d+", r"[a-z]{2,}"])
def test_ordinary_patterns_compile(pattern: str) -> None:
    assert compile_pattern(pattern).pattern == pattern


def test_resolve_follows_rfc6901() -> None:
    document = {"a": [10, {"~k": 1}], "": 2}
    assert resolve(document, []) == (True, document)
    assert resolve(document, ["a", "1", "~k"]) == (True, 1)
    assert resolve(document, [""]) == (True, 2)
    assert resolve(document, ["a", "01"]) == (False, None)
    assert resolve(document, ["a", "5"]) == (False, None)

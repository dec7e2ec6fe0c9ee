"""Whether a hosted call runs, asks a person or is refused: the tool's `policy` and `[[tool_rules]]`.

```toml
[[tool_rules]]
tool = "grep_*"                                   # a glob over tool names (fnmatch, case-sensitive)
when = [{ pointer = "/q", matches = "^-" }]       # optional: every condition must match the arguments
decision = "deny"                                 # allow | ask | deny
```

A call's decision: when rules match it, the strictest of them (deny beats ask beats allow), else the tool's own
`policy`; a tool declared `policy = "deny"` stays denied whatever a rule says. An `allow_for_session` answer lets
that tool through the rest of the thread's asks (`grant`), never a deny. A condition names an argument by JSON
pointer (RFC 6901; a string is matched as it is, any other value as its JSON text, a missing one never matches)
and a regular expression searched in it.

Python's `re` backtracks, and a call's arguments come from a model: a pattern with a repetition inside a
repetition, or an alternation inside one, or a backreference, is refused at load (they are what makes matching
exponential), and a value longer than `MATCH_CHARS` is not searched at all: the condition counts as matched for
an `ask` or `deny` rule and as unmatched for an `allow` rule, so an oversized argument can only make a call
stricter. The same check guards `[tool_audit] redact` patterns (`compile_pattern`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import msgspec

from bbridge.config_file import Refusal
from bbridge.toolhost.declarations import Policy

MATCH_CHARS = 4096  # the longest value a condition searches (quadratic patterns stay in milliseconds)
STRICTNESS: dict[Policy, int] = {"allow": 0, "ask": 1, "deny": 2}

_parser: Any = importlib.import_module("re._parser")  # the stdlib's own pattern parser (sre_parse's new home)
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


class _ConditionTable(msgspec.Struct, forbid_unknown_fields=True):
    pointer: str
    matches: str


class _RuleTable(msgspec.Struct, forbid_unknown_fields=True):
    tool: str
    decision: Policy
    when: list[_ConditionTable] = []


@dataclass(frozen=True)
class Condition:
    pointer: list[str]  # the pointer's reference tokens, unescaped
    text: str  # as written, for reports
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Rule:
    index: int
    tool: str
    decision: Policy
    when: list[Condition]

    @property
    def name(self) -> str:
        return f"tool_rules[{self.index}] (tool = {self.tool!r}, decision = {self.decision!r})"

    def matches(self, tool: str, arguments: Any) -> bool:
        return fnmatchcase(tool, self.tool) and all(self._holds(c, arguments) for c in self.when)

    def _holds(self, condition: Condition, arguments: Any) -> bool:
        found, value = resolve(arguments, condition.pointer)
        if not found:
            return False
        text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
        if len(text) > MATCH_CHARS:
            return self.decision != "allow"  # not searched: it can only make the call stricter
        return condition.pattern.search(text) is not None


@dataclass(frozen=True)
class Verdict:
    """A call's decision and who made it (named in a deny's message and in the audit)."""

    decision: Policy
    by: str


def compile_pattern(text: str) -> re.Pattern[str]:
    """`text` compiled, or ValueError saying why it cannot be used (a syntax error, or a pattern whose matching
    can take exponential time)."""
    try:
        parsed = _parser.parse(text)
        pattern = re.compile(text)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    problem = _risky(parsed, inside_repeat=False)
    if problem is not None:
        raise ValueError(f"{problem}: its matching can take exponential time; rewrite it without ({text!r})")
    return pattern


def _risky(subpattern: Any, *, inside_repeat: bool) -> str | None:
    for op, av in subpattern:
        name = str(op)
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            return "a backreference"
        if inside_repeat and name in _REPEATS and av[1] > 1:
            return "a repetition inside a repetition"
        if inside_repeat and name == "BRANCH":
            return "an alternation inside a repetition (use a character class?)"
        nested = inside_repeat or (name in _REPEATS and av[1] > 1)
        for child in _children(av):
            problem = _risky(child, inside_repeat=nested)
            if problem is not None:
                return problem
    return None


def _children(av: Any) -> Iterator[Any]:
    """The sub-patterns among an opcode's arguments (a repeat's body, a group's, each branch of an alternation)."""
    items = av if isinstance(av, tuple | list) else (av,)
    for item in items:
        if isinstance(item, _parser.SubPattern):
            yield item
        elif isinstance(item, list):
            yield from (child for child in item if isinstance(child, _parser.SubPattern))


def resolve(document: Any, pointer: Sequence[str]) -> tuple[bool, Any]:
    """The value at a JSON pointer's tokens, and whether there is one."""
    for token in pointer:
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif isinstance(document, list) and token.isdigit() and (token == "0" or not token.startswith("0")):
            if int(token) >= len(document):
                return False, None
            document = document[int(token)]
        else:
            return False, None
    return True, document


def _pointer(text: str) -> list[str]:
    if text and not text.startswith("/"):
        raise ValueError(f"pointer {text!r}: a JSON pointer is empty or starts with '/' (e.g. \"/q\")")
    return [token.replace("~1", "/").replace("~0", "~") for token in text.split("/")[1:]]


def load_rules(tables: Any) -> tuple[list[Rule], list[Refusal]]:
    """The `[[tool_rules]]` array: its usable rules, and one refusal per broken one (which is left out)."""
    if not isinstance(tables, list):
        return [], [Refusal("tool_rules", None, "expected an array of tables ([[tool_rules]])")]
    rules: list[Rule] = []
    refused: list[Refusal] = []
    for index, table in enumerate(tables):
        section = f"tool_rules[{index}]"
        try:
            raw = msgspec.convert(table, _RuleTable)
        except msgspec.ValidationError as exc:
            refused.append(Refusal(section, None, str(exc)))
            continue
        conditions: list[Condition] = []
        for number, condition in enumerate(raw.when):
            try:
                conditions.append(
                    Condition(_pointer(condition.pointer), condition.pointer, compile_pattern(condition.matches))
                )
            except ValueError as exc:
                refused.append(Refusal(section, f"when[{number}]", str(exc)))
        if len(conditions) == len(raw.when):
            rules.append(Rule(index, raw.tool, raw.decision, conditions))
    return rules, refused


@dataclass
class Policies:
    """The rules, and each thread's session grants (`allow_for_session`), which end with the thread."""

    rules: list[Rule] = field(default_factory=list)
    _grants: dict[str, set[str]] = field(default_factory=dict)

    def decide(self, thread_id: str, tool: str, policy: Policy, source: str, arguments: Mapping[str, Any]) -> Verdict:
        verdict = self._ruled(tool, policy, source, arguments)
        if verdict.decision == "ask" and tool in self._grants.get(thread_id, ()):
            return Verdict("allow", f"allow_for_session, granted earlier in this thread ({verdict.by} asks)")
        return verdict

    def _ruled(self, tool: str, policy: Policy, source: str, arguments: Mapping[str, Any]) -> Verdict:
        own = Verdict(policy, f"the tool's policy ({source})")
        if policy == "deny":
            return own
        matching = [rule for rule in self.rules if rule.matches(tool, arguments)]
        if not matching:
            return own
        strictest = max(matching, key=lambda rule: STRICTNESS[rule.decision])  # the first of the strictest
        return Verdict(strictest.decision, strictest.name)

    def grant(self, thread_id: str, tool: str) -> None:
        self._grants.setdefault(thread_id, set()).add(tool)

    def forget(self, thread_id: str) -> None:
        self._grants.pop(thread_id, None)

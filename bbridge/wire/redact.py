"""Redaction of recorded lanes (`--redact`): secrets and machine facts replaced before a lane line is written.

A recorded line is one JSON-RPC message as text. Redaction decodes it and rewrites only string values (and
object keys), so what is written is still valid JSON whatever a pattern matches — a regex over raw bytes could
cut an escape sequence in half. A line that is not JSON is redacted as plain text (the entry that carries it is
encoded afterwards, so it stays valid too). A line nothing matched is written as it came, byte for byte.

Each match becomes `[redacted:NAME]`; the recorder counts matches per name, and the recording's README lists the
names, their patterns and the counts — never what was matched (a pattern that is a literal, which may be the
secret itself, is shown by its length only). Built-ins (`default_redactions`): the home
directory, common API-key shapes, bearer tokens, and the whole value of a secret-named field (`apiKey`,
`token`, `password`, `authorization`, …).

Bridges written with the kit redact their provider lanes the same way: the daemon hands them the list in
`BB_PROVIDER_BRIDGE_RECORD_REDACT` (JSON `[[name, pattern], …]`) beside the record directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REDACT_ENV = "BB_PROVIDER_BRIDGE_RECORD_REDACT"
SECRET_FIELD = "secret-field"
# object keys whose string value is a secret as a whole; `inputTokens` and the like hold numbers, not strings
_SECRET_KEY = r"(?i)(?:api[_-]?key|secret|token|password|passwd|authorization|credentials?)$"
_KEY_SHAPES = (
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})"
)


@dataclass(frozen=True)
class Pattern:
    """One named pattern: `pattern-N` for the N-th `--redact`, or a built-in's name. The built-in `secret-field`
    matches object keys: their whole string value is replaced."""

    name: str
    regex: str


def default_redactions(home: str | None = None) -> list[Pattern]:
    """The built-ins: the home directory (when it is not `/`), API-key shapes, bearer tokens, secret-named fields."""
    home = (home if home is not None else os.path.expanduser("~")).rstrip("/")
    found = [Pattern("home", re.escape(home) + r"(?![\w.-])")] if home else []  # not /home/u in /home/user2
    bearer = Pattern("bearer", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}")
    return [*found, Pattern("api-key", _KEY_SHAPES), bearer, Pattern(SECRET_FIELD, _SECRET_KEY)]


def user_redactions(regexes: Sequence[str]) -> list[Pattern]:
    """`--redact` patterns, named by position; a pattern that does not compile raises `ValueError` naming it."""
    patterns = []
    for number, regex in enumerate(regexes, 1):
        try:
            re.compile(regex)
        except re.error as exc:
            raise ValueError(f"--redact {regex!r}: not a regular expression ({exc})") from None
        patterns.append(Pattern(f"pattern-{number}", regex))
    return patterns


def shown(pattern: Pattern) -> str:
    """How a recording names a pattern: its text, unless it matches its own text (a literal, so maybe the secret
    itself): then only its length."""
    if re.fullmatch(pattern.regex, pattern.regex):
        return f"(a literal of {len(pattern.regex)} characters, not shown)"
    return pattern.regex


def to_env(patterns: Sequence[Pattern]) -> str:
    return json.dumps([[p.name, p.regex] for p in patterns])


def from_env(env: Mapping[str, str] = os.environ) -> list[Pattern]:
    """The list the daemon handed down; an unusable value redacts nothing rather than stopping the bridge."""
    try:
        return [Pattern(str(name), str(regex)) for name, regex in json.loads(env.get(REDACT_ENV) or "[]")]
    except (ValueError, TypeError):
        return []


def _not_json(constant: str) -> Any:
    """`NaN`/`Infinity` are Python's, not JSON's: such a line is redacted as text."""
    raise ValueError(constant)


class Redactor:
    """Applies the patterns (and the secret-field rule) to lines; counts what it replaced, per name."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self.patterns = list(patterns)
        self._compiled = [(p.name, re.compile(p.regex)) for p in self.patterns if p.name != SECRET_FIELD]
        keys = [p.regex for p in self.patterns if p.name == SECRET_FIELD]
        self._secret_key = re.compile(keys[0]) if keys else None

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def line(self, text: str, counts: Counter[str]) -> str:
        """`text` redacted (valid JSON stays valid JSON), matches added to `counts`; unchanged text is returned as is."""
        try:
            value = json.loads(text, parse_constant=_not_json)
        except ValueError:
            return self._text(text, counts)
        found: Counter[str] = Counter()
        redacted = self._value(value, found)
        if not found:
            return text
        try:
            encoded = json.dumps(redacted, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a number beyond a double (1e400) decodes as inf, which JSON cannot spell: as text
            return self._text(text, counts)
        counts.update(found)
        return encoded

    def _text(self, text: str, counts: Counter[str]) -> str:
        for name, regex in self._compiled:
            text, hits = regex.subn(f"[redacted:{name}]", text)
            if hits:
                counts[name] += hits
        return text

    def _value(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            return self._text(value, counts)
        if isinstance(value, list):
            return [self._value(item, counts) for item in value]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if self._secret_key is not None and isinstance(item, str) and item and self._secret_key.search(key):
                counts[SECRET_FIELD] += 1
                item = f"[redacted:{SECRET_FIELD}]"
            out[self._text(key, counts)] = self._value(item, counts)
        return out


SIDECAR_GLOB = ".redacted-*.json"


def write_counts(folder: Path, tag: str, counts: Counter[str]) -> None:
    """A writer's running counts beside the lanes it redacted (`.redacted-<tag>.json`); read by the README."""
    (folder / f".redacted-{tag}.json").write_text(json.dumps(dict(counts)), encoding="utf-8")


def read_counts(folder: Path, remove: bool = False) -> Counter[str]:
    """Every writer's counts in a cell folder, summed (and the files removed, with `remove`)."""
    total: Counter[str] = Counter()
    for path in sorted(folder.glob(SIDECAR_GLOB)):
        with contextlib.suppress(ValueError, AttributeError, OSError):
            total.update({str(k): int(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()})
        if remove:
            path.unlink(missing_ok=True)
    return total

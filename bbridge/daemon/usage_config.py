"""`[pricing."MODEL"]` and `[[budgets]]` of `bbridge.toml` (issue 49): what a model's tokens cost, and the limits
the daemon checks before every `turn/start` and `turn/steer` (`budgets.py`).

Each entry is read on its own: a broken one is refused whole, with every reason (a `Refusal`, as the providers'
entries are), and the rest apply. No price is built in: prices change, and a stale one would be worse than none.

    [pricing."gpt-5"]                 # a model's name as its thread's options name it, or a glob ("claude-*")
    input_per_mtok = 1.25             # USD per million input tokens not read from the cache
    cached_input_per_mtok = 0.125     # per million cached input tokens (default: input_per_mtok)
    output_per_mtok = 10              # per million output tokens (reasoning output included)

    [[budgets]]
    name = "daily-all"                # unique; errors, approvals and daemon/status name it
    scope = "all"                     # all | provider | model | thread | client | run (default all)
    match = "*"                       # a glob over the scope's key (default "*"); `all` has no key
    window = "1d"                     # 1h | 1d | 7d | 30d (rolling) | thread | run
    tokens = 2000000                  # and/or usd = 50 (usd needs [pricing."MODEL"])
    action = "ask"                    # deny | ask | warn
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, get_args

import msgspec

from bbridge.config_file import Refusal, read_toml
from bbridge.wire.usage import BudgetAction, BudgetScope, BudgetWindow

WINDOW_S: Final[Mapping[str, float]] = {"1h": 3600.0, "1d": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}
SCOPES: Final = get_args(BudgetScope)
WINDOWS: Final = get_args(BudgetWindow)
ACTIONS: Final = get_args(BudgetAction)
PRICE_KEYS: Final = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok")
BUDGET_KEYS: Final = ("name", "scope", "match", "window", "tokens", "usd", "action")
GLOB: Final = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Price:
    """USD per million tokens: input read fresh, input read from the cache, output."""

    input: float
    cached_input: float
    output: float

    def usd(self, uncached: int, cached: int, output: int) -> float:
        return (uncached * self.input + cached * self.cached_input + output * self.output) / 1_000_000


@dataclass(frozen=True)
class Pricing:
    """The configured prices by model: an exact name first, else the first glob (in file order) that matches."""

    exact: Mapping[str, Price] = field(default_factory=dict)
    globs: tuple[tuple[str, Price], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.exact or self.globs)

    def price(self, model: str | None) -> Price | None:
        if model is None:
            return None
        found = self.exact.get(model)
        if found is not None:
            return found
        return next((price for pattern, price in self.globs if fnmatch.fnmatchcase(model, pattern)), None)

    def models(self) -> list[str]:
        return [*self.exact, *(pattern for pattern, _ in self.globs)]


@dataclass(frozen=True)
class Budget:
    """One `[[budgets]]` entry: which requests it covers (`scope`, `match`), over what (`window`), its limit
    (`tokens` and/or `usd`) and what going past it does (`action`)."""

    name: str
    scope: BudgetScope
    match: str
    window: BudgetWindow
    tokens: int | None
    usd: float | None
    action: BudgetAction

    def covers(self, key: str | None) -> bool:
        """Whether a request whose scope key is `key` is this budget's (`all` covers every request)."""
        return self.scope == "all" or (key is not None and fnmatch.fnmatchcase(key, self.match))


@dataclass(frozen=True)
class UsageConfig:
    pricing: Pricing = field(default_factory=Pricing)
    budgets: tuple[Budget, ...] = ()
    refused: tuple[Refusal, ...] = ()


def load_usage(path: Path | None) -> UsageConfig:
    """The file's prices and budgets (none without a file); a `ConfigError` when the file cannot be used."""
    return usage_from(read_toml(path)) if path is not None else UsageConfig()


def usage_from(raw: Mapping[str, Any]) -> UsageConfig:
    refused: list[Refusal] = []
    pricing = _pricing(raw.get("pricing", {}), refused)
    budgets: list[Budget] = []
    entries = raw.get("budgets", [])
    if not isinstance(entries, list):
        refused.append(Refusal("budgets", None, "expected an array of tables ([[budgets]])"))
        entries = []
    names: dict[str, int] = {}
    for index, table in enumerate(entries):
        name = table.get("name") if isinstance(table, dict) else None
        where = f"budgets[{index}]" + (f" (name {msgspec.json.encode(name).decode()})" if isinstance(name, str) else "")
        problems = _budget_problems(table, pricing)
        if isinstance(name, str) and names.setdefault(name, index) != index:
            problems.append(("name", f"repeated (first at budgets[{names[name]}])"))
        refused.extend(Refusal(where, key, problem) for key, problem in problems)
        if not problems:
            budgets.append(_budget(table))
    return UsageConfig(pricing, tuple(budgets), tuple(refused))


# -- [pricing."MODEL"] -------------------------------------------------------------------------------------------


def _pricing(section: Any, refused: list[Refusal]) -> Pricing:
    if not isinstance(section, dict):
        refused.append(Refusal("pricing", None, 'expected a table of [pricing."MODEL"] tables'))
        return Pricing()
    exact: dict[str, Price] = {}
    globs: list[tuple[str, Price]] = []
    for model, table in section.items():
        where = f"pricing.{msgspec.json.encode(model).decode()}"
        if not isinstance(table, dict):
            refused.append(Refusal(where, None, "expected a table of input_per_mtok, cached_input_per_mtok, "
                                   "output_per_mtok (USD per million tokens)"))  # fmt: skip
            continue
        problems = [
            (key, "unknown key (known: " + ", ".join(PRICE_KEYS) + ")") for key in table if key not in PRICE_KEYS
        ]
        problems += [(key, "missing (required)") for key in ("input_per_mtok", "output_per_mtok") if key not in table]
        problems += [(key, why) for key in PRICE_KEYS if key in table and (why := _rate(table[key])) is not None]
        if problems:
            refused.extend(Refusal(where, key, why) for key, why in problems)
            continue
        fresh = float(table["input_per_mtok"])
        cached = table.get("cached_input_per_mtok", fresh)
        price = Price(fresh, float(cached), float(table["output_per_mtok"]))
        if GLOB.search(model):
            globs.append((model, price))
        else:
            exact[model] = price
    return Pricing(exact, tuple(globs))


def _rate(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number of USD per million tokens, got {type(value).__name__}"
    if not math.isfinite(value) or value < 0:
        return f"expected a finite number of USD, at least 0, got {value}"
    return None


# -- [[budgets]] -------------------------------------------------------------------------------------------------


def _budget_problems(table: Any, pricing: Pricing) -> list[tuple[str | None, str]]:
    """Every reason the entry cannot be used: (its key, why)."""
    if not isinstance(table, dict):
        return [(None, "expected a table ([[budgets]])")]
    problems: list[tuple[str | None, str]] = [
        (key, f"unknown key (known: {', '.join(BUDGET_KEYS)})") for key in table if key not in BUDGET_KEYS
    ]
    for key in ("name", "window", "action"):
        if key not in table:
            problems.append((key, "missing (required)"))
    name, match = table.get("name"), table.get("match", "*")
    if "name" in table and (not isinstance(name, str) or not name.strip()):
        problems.append(("name", "expected a non-empty string"))
    if not isinstance(match, str) or not match:
        problems.append(("match", "expected a non-empty string (a glob over the scope's key)"))
    for key, known in (("scope", SCOPES), ("window", WINDOWS), ("action", ACTIONS)):
        if key in table and table[key] not in known:
            problems.append((key, f"expected one of {', '.join(known)}, got {_shown(table[key])}"))
    tokens, usd = table.get("tokens"), table.get("usd")
    if tokens is None and usd is None:
        problems.append((None, "needs a limit: tokens and/or usd"))
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0):
        problems.append(("tokens", f"expected a positive integer, got {_shown(tokens)}"))
    if usd is not None:
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd <= 0:
            problems.append(("usd", f"expected a positive number of USD, got {_shown(usd)}"))
        elif not pricing:
            problems.append(("usd", 'needs prices: no [pricing."MODEL"] table is configured'))
        elif table.get("scope") == "model" and _unpriced(match, pricing):
            problems.append(("usd", f'needs a price for model {match!r}: add [pricing."{match}"]'))
    return problems


def _unpriced(match: Any, pricing: Pricing) -> bool:
    """A model scope's one model (a match that is no glob) that has no price."""
    return isinstance(match, str) and not GLOB.search(match) and pricing.price(match) is None


def _budget(table: dict[str, Any]) -> Budget:
    tokens, usd = table.get("tokens"), table.get("usd")
    return Budget(
        name=table["name"],
        scope=table.get("scope", "all"),
        match=table.get("match", "*"),
        window=table["window"],
        tokens=tokens,
        usd=None if usd is None else float(usd),
        action=table["action"],
    )


def _shown(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return type(value).__name__

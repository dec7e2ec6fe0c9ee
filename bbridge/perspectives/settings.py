"""`[perspectives]` in bbridge.toml: the two phase tuples, the optional panel of providers, anonymity, the budgets.

The table is checked whole when the file is read: any problem refuses it (with every reason, each naming its
key), and without the table there are no Perspectives tools. Provider and model names are not checked here:
what is available is known only when a tool is called (`tuples` validates them then, before any hidden thread
exists), so `bbridge config check` merely warns about a provider the file does not configure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, Literal, cast, get_args

from bbridge.config_file import Refusal, read_keys, read_toml
from bbridge.config_file import Refused as _Refused
from bbridge.wire.protocol import ReasoningLevel

SECTION: Final = "perspectives"
INHERIT: Final = "inherit"
PermissionMode = Literal["full", "accept-edits", "auto"]
REASONING_LEVELS: Final[tuple[str, ...]] = get_args(ReasoningLevel)
PERMISSION_MODES: Final[tuple[str, ...]] = get_args(PermissionMode)
TUPLE_KEYS: Final = ("provider", "model", "reasoning", "permission")


@dataclass(frozen=True)
class PhaseTuple:
    """One phase's execution settings; None is "inherit" (or blank): resolved against the caller (`tuples`)."""

    provider: str | None = None
    model: str | None = None
    reasoning: ReasoningLevel | None = None
    permission: PermissionMode | None = None

    def describe(self) -> str:
        values = (self.provider, self.model, self.reasoning, self.permission)
        return ", ".join(f"{key} {value or INHERIT}" for key, value in zip(TUPLE_KEYS, values, strict=True))


@dataclass(frozen=True)
class PerspectivesConfig:
    """The table read: `planner` also runs the synthesis, `worker` runs help's expert and every panel worker;
    `panel`, when given, the workers' providers, lens by lens in turn. Budgets are seconds."""

    planner: PhaseTuple = PhaseTuple()
    worker: PhaseTuple = PhaseTuple()
    panel: tuple[str, ...] | None = None
    anonymous: bool = True
    planner_s: float = 15.0  # the planner, one retry included
    wrapup_s: float = 1200.0  # then each unfinished worker is asked to wrap up
    hard_cap_s: float = 1500.0  # the whole run
    synthesis_s: float = 90.0  # reserved inside the hard cap
    spawn_timeout_s: float = 60.0  # each hidden thread's construction

    def providers(self) -> list[tuple[str, str]]:
        """The provider ids the table names, each with where (`planner.provider`, `panel[1]`)."""
        named = [(f"{phase}.provider", t.provider) for phase, t in (("planner", self.planner), ("worker", self.worker))]
        named += [(f"panel[{i}]", provider) for i, provider in enumerate(self.panel or ())]
        return [(where, provider) for where, provider in named if provider is not None]


BUDGETS: Final = tuple(f.name for f in fields(PerspectivesConfig) if f.name.endswith("_s"))
KEYS: Final = tuple(f.name for f in fields(PerspectivesConfig))


def load_perspectives(path: Path | None) -> tuple[PerspectivesConfig | None, tuple[Refusal, ...]]:
    """The file's `[perspectives]` (None without a file or the table, or when it is refused) and the refusals; a
    `ConfigError` when the file itself cannot be used."""
    if path is None:
        return None, ()
    return perspectives_from(read_toml(path))


def perspectives_from(raw: Mapping[str, Any]) -> tuple[PerspectivesConfig | None, tuple[Refusal, ...]]:
    """The table of a parsed file: the config, or None and one refusal per problem (the table is refused whole)."""
    if SECTION not in raw:
        return None, ()
    table = raw[SECTION]
    if not isinstance(table, dict):
        return None, (Refusal(SECTION, None, f"expected a table, got {type(table).__name__}"),)
    values, problems = read_keys(table, _READERS)
    if not problems:
        config = PerspectivesConfig(**values)
        problems = _budget_problems(config)
    if problems:
        return None, tuple(Refusal(SECTION, None, problem) for problem in problems)
    return config, ()


def _budget_problems(config: PerspectivesConfig) -> list[str]:
    """The budgets' order: the synthesis is reserved inside the hard cap, and the planner and the wrap-up come
    before that reserve."""
    problems: list[str] = []
    if config.synthesis_s >= config.hard_cap_s:
        problems.append(f"synthesis_s ({config.synthesis_s:g}) must be less than hard_cap_s ({config.hard_cap_s:g})")
        return problems
    panel_end = config.hard_cap_s - config.synthesis_s
    for key in ("planner_s", "wrapup_s"):
        value = getattr(config, key)
        if value >= panel_end:
            problems.append(f"{key} ({value:g}) must be less than hard_cap_s - synthesis_s ({panel_end:g})")
    return problems


# -- the keys --------------------------------------------------------------------


def _read_tuple(key: str, value: Any) -> PhaseTuple:
    if not isinstance(value, dict):
        raise _Refused(f"expected a table {{ {', '.join(TUPLE_KEYS)} }}, got {type(value).__name__}")
    unknown = [name for name in value if name not in TUPLE_KEYS]
    if unknown:
        raise _Refused(f"unknown key {', '.join(map(repr, unknown))} (known: {', '.join(TUPLE_KEYS)})")
    chosen: dict[str, str | None] = {}
    for name in TUPLE_KEYS:
        text = value.get(name, "")
        if not isinstance(text, str):
            raise _Refused(f"{name}: expected a string, got {type(text).__name__}")
        chosen[name] = None if text.strip() in ("", INHERIT) else text.strip()
    for name, allowed in (("reasoning", REASONING_LEVELS), ("permission", PERMISSION_MODES)):
        if chosen[name] is not None and chosen[name] not in allowed:
            raise _Refused(f"{name}: expected {INHERIT} or one of {', '.join(allowed)}, got {chosen[name]!r}")
    reasoning, permission = chosen["reasoning"], chosen["permission"]  # checked just above
    return PhaseTuple(
        chosen["provider"],
        chosen["model"],
        cast("ReasoningLevel | None", reasoning),
        cast("PermissionMode | None", permission),
    )


def _read_panel(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _Refused("expected a list of provider ids (at least one; leave the key out for none)")
    if not all(isinstance(item, str) and item.strip() for item in value):
        raise _Refused("expected provider ids (non-empty strings)")
    return tuple(item.strip() for item in value)


def _read_flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Refused(f"expected true or false, got {type(value).__name__}")
    return value


def _read_seconds(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Refused(f"expected a number of seconds, got {type(value).__name__}")
    if not value > 0 or value == float("inf"):
        raise _Refused(f"expected a positive number of seconds, got {value!r}")
    return float(value)


_READERS: dict[str, Callable[[str, Any], Any]] = {
    "planner": _read_tuple,
    "worker": _read_tuple,
    "panel": _read_panel,
    "anonymous": _read_flag,
    **dict.fromkeys(BUDGETS, _read_seconds),
}


def unconfigured(config: PerspectivesConfig, providers: Mapping[str, object]) -> list[str]:
    """Warnings for the providers the table names that `providers` (the file's) lacks: not a refusal, the tool
    call is where they fail (with no thread created)."""
    known = ", ".join(sorted(providers))
    return [
        f"{SECTION}.{where}: provider {provider!r} is not configured (providers: {known})"
        for where, provider in config.providers()
        if provider not in providers
    ]

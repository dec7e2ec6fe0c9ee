"""The `[[agents]]` contributions and `[skills.roots.NAME]` of `bbridge.toml`.

An entry is checked whole when the file is read: a broken one is refused with a reason naming it (`agents[2] (id
"x"): env: ...`, entries counted from 0) and the rest load, as a refused provider entry is. What can only be known
per turn (an instructions `file` readable, a skill present) is left to the resolution, where it fails that
contribution for that turn alone.

Matching, fixed here so that a contribution's patterns are compiled once:
- `scope.project` is an absolute path glob (`~` expanded) matched against the whole of the thread's cwd and of
  its git work-tree root: `*` and `?` stay within one path segment, `**` crosses `/`, and `/**` at the end (or
  `/**/` inside) also matches no segment at all, so `/srv/payments/**` matches `/srv/payments` itself;
- `when.model` is one glob or a list of them (any may match; a name without `*?[` is an exact name), shell style
  over the whole model id (`*` matches anything, `/` too); a thread without a model matches none;
- `when.git_remote` is a substring of the `origin` remote's URL, or, when it holds `*`, `?` or `[`, a shell-style
  glob over the whole URL; either may match the URL as written or its `HOST/PATH` form (`git@github.com:acme/x`
  and `https://github.com/acme/x` are both `github.com/acme/x`: `gitinfo.remote_forms`); a thread outside a git
  work tree, or without an `origin`, matches neither;
- `when.provider` lists exact provider ids.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from bbridge.config_file import ConfigError, Refusal, read_toml
from bbridge.wire.agent_config import InstructionMode

ROOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # no `:`, which separates ROOT:SKILL
ENV_NAME = re.compile(r"BB_[A-Za-z0-9_]+")
_GLOB_CHARS = re.compile(r"[*?\[]")


# -- the TOML shapes ------------------------------------------------------------


class _ScopeTable(msgspec.Struct, forbid_unknown_fields=True):
    project: str | None = None
    thread: str | None = None


class _WhenTable(msgspec.Struct, forbid_unknown_fields=True):
    provider: list[str] | None = None
    model: str | list[str] | None = None
    git_remote: str | None = None


class _InstructionsTable(msgspec.Struct, forbid_unknown_fields=True):
    mode: InstructionMode = "append"
    text: str | None = None
    file: str | None = None


class _ToolsTable(msgspec.Struct, forbid_unknown_fields=True):
    include: list[str] = []
    exclude: list[str] = []


SKILLS_KEYS = ("roots", "native")


class _RootTable(msgspec.Struct, forbid_unknown_fields=True):
    path: str
    providers: list[str] | None = None


# -- what an entry is once read ---------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Which threads a contribution is for: all, those of a project (a path glob), or one thread."""

    kind: Literal["all", "project", "thread"] = "all"
    value: str = ""  # the project glob or the thread id
    pattern: re.Pattern[str] | None = None

    def describe(self) -> str:
        return self.kind if self.kind == "all" else f"{self.kind} {self.value}"


@dataclass(frozen=True)
class Conditions:
    """`when`: each given condition must hold (None: not given)."""

    providers: tuple[str, ...] | None = None
    models: tuple[str, ...] | None = None
    model_patterns: tuple[re.Pattern[str], ...] = ()
    git_remote: str | None = None
    remote_pattern: re.Pattern[str] | None = None  # when `git_remote` is a glob; else it is a substring


@dataclass(frozen=True)
class InstructionsSource:
    """A contribution's instructions: its `text`, or its `file` (absolute), read at each resolution."""

    mode: InstructionMode
    text: str | None = None
    file: Path | None = None


@dataclass(frozen=True)
class SkillRef:
    root: str
    name: str

    def __str__(self) -> str:
        return f"{self.root}:{self.name}"


@dataclass(frozen=True)
class Contribution:
    """One `[[agents]]` entry; `index` is its place in the file (from 0)."""

    id: str
    index: int
    scope: Scope = Scope()
    when: Conditions = Conditions()
    instructions: InstructionsSource | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    skills: tuple[SkillRef, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SkillRootConfig:
    """`[skills.roots.NAME]`: a directory of skills and the providers whose bridges get it (None: all)."""

    name: str
    path: Path
    providers: tuple[str, ...] | None = None

    def applies_to(self, provider_id: str) -> bool:
        return self.providers is None or provider_id in self.providers


@dataclass(frozen=True)
class AgentsConfig:
    """What the file gives: the contributions in file order, the skill roots loaded, what was refused."""

    path: Path | None = None
    contributions: tuple[Contribution, ...] = ()
    roots: Mapping[str, SkillRootConfig] = field(default_factory=dict)
    refused: tuple[Refusal, ...] = ()
    native: frozenset[str] | None = None  # `[skills] native`: the providers that load roots themselves (None: default)


def load_agents(path: Path | None) -> AgentsConfig:
    """The `[[agents]]` and `[skills]` of `path` (none without a file); a `ConfigError` when the file, or one of
    the two sections as a whole, cannot be used."""
    if path is None:
        return AgentsConfig()
    return agents_from(read_toml(path), path)


def agents_from(raw: Mapping[str, Any], path: Path) -> AgentsConfig:
    """The two sections of a parsed file; relative paths in them are the file's directory's."""
    base = path.absolute().parent
    skills = raw.get("skills", {})
    if not isinstance(skills, dict):
        raise ConfigError(f"{path}: skills: expected a table ([skills.roots.NAME]), got {type(skills).__name__}")
    entries = raw.get("agents", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: agents: expected an array of tables ([[agents]]), got {type(entries).__name__}")
    roots, refused = _roots(skills, base)
    native = _native(skills, refused)
    declared = set(skills.get("roots", {})) if isinstance(skills.get("roots"), dict) else set()
    contributions: list[Contribution] = []
    first: dict[str, int] = {}  # each id's first entry, loaded or refused: a repeat is refused either way
    for index, table in enumerate(entries):
        contribution, problems = _entry(index, table, base, declared)
        id_ = table.get("id") if isinstance(table, dict) else None
        if isinstance(id_, str) and first.setdefault(id_, index) != index:
            contribution, problems = None, [f"id: repeated (first at agents[{first[id_]}])", *problems]
        refused.extend(Refusal(_entry_name(index, table), None, problem) for problem in problems)
        if contribution is not None:
            contributions.append(contribution)
    return AgentsConfig(path.absolute(), tuple(contributions), roots, tuple(refused), native)


# -- [skills.roots.NAME] ---------------------------------------------------------


def _roots(skills: dict[str, Any], base: Path) -> tuple[dict[str, SkillRootConfig], list[Refusal]]:
    refused = [Refusal("skills", key, "unknown key (known: roots, native)") for key in skills if key not in SKILLS_KEYS]
    tables = skills.get("roots", {})
    if not isinstance(tables, dict):
        return {}, [*refused, Refusal("skills", "roots", "expected a table of [skills.roots.NAME] tables")]
    roots: dict[str, SkillRootConfig] = {}
    for name, table in tables.items():
        section = f"skills.roots.{name}"
        try:
            if not ROOT_NAME.fullmatch(name):
                raise _Refused("bad root name (expected 1 to 64 of A-Z a-z 0-9 _ . -)")
            root = _convert(table, _RootTable)
            path = _path(root.path, base)
            if not path.is_dir():
                raise _Refused(f"path: not a directory: {path}")
            if root.providers is not None and not all(root.providers):
                raise _Refused("providers: expected provider ids (non-empty strings)")
        except _Refused as exc:
            refused.append(Refusal(section, None, str(exc)))
            continue
        roots[name] = SkillRootConfig(name, path, tuple(root.providers) if root.providers is not None else None)
    return roots, refused


def _native(skills: dict[str, Any], refused: list[Refusal]) -> frozenset[str] | None:
    """`[skills] native = [provider ids]`: the bridges given `skills/configure` roots to load themselves (the
    others' threads read skills with the hosted `skill` tool); absent, the default (Claude Code and Codex)."""
    value = skills.get("native")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        refused.append(Refusal("skills", "native", "expected a list of provider ids (non-empty strings)"))
        return None
    return frozenset(value)


# -- one [[agents]] entry --------------------------------------------------------


class _Refused(Exception):
    """A value that does not fit; the message is the refusal's error."""


def _entry(index: int, table: Any, base: Path, roots: set[str]) -> tuple[Contribution | None, list[str]]:
    """The entry's contribution, or None and every problem it has (each naming its key)."""
    if not isinstance(table, dict):
        return None, [f"expected a table, got {type(table).__name__}"]
    problems = [] if "id" in table else ["id: missing (required)"]
    values: dict[str, Any] = {}
    for key, value in table.items():
        reader = _READERS.get(key)
        try:
            if reader is None:
                raise _Refused(f"unknown key (known: {', '.join(_READERS)})")
            values.update(reader(value, base, roots))
        except _Refused as exc:
            problems.append(f"{key}: {exc}")
    if problems:
        return None, problems
    return Contribution(index=index, **values), []


def _entry_name(index: int, table: Any) -> str:
    name = f"agents[{index}]"
    if isinstance(table, dict) and isinstance(table.get("id"), str):
        name += f" (id {msgspec.json.encode(table['id']).decode()})"
    return name


def _read_id(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    id_ = _convert(value, str)
    if not id_.strip():
        raise _Refused("expected a non-empty string")
    return {"id": id_}


def _read_scope(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    scope = _convert(value, str | _ScopeTable)
    if isinstance(scope, str):
        if scope != "all":
            raise _Refused(f'expected "all", {{ project = GLOB }} or {{ thread = ID }}, got {scope!r}')
        return {"scope": Scope()}
    if (scope.project is None) == (scope.thread is None):
        raise _Refused("expected exactly one of project or thread")
    if scope.thread is not None:
        if not scope.thread:
            raise _Refused("thread: expected a thread id")
        return {"scope": Scope("thread", scope.thread)}
    glob = os.path.expanduser(scope.project or "")
    if not os.path.isabs(glob):
        raise _Refused(f"project: expected an absolute path glob, got {scope.project!r}")
    glob = glob.rstrip("/") or "/"
    return {"scope": Scope("project", glob, path_glob(glob))}


def _read_when(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    when = _convert(value, _WhenTable)
    if when.provider is not None and not (when.provider and all(when.provider)):
        raise _Refused("provider: expected provider ids (non-empty strings, at least one)")
    models = None if when.model is None else (when.model,) if isinstance(when.model, str) else tuple(when.model)
    if models is not None and not (models and all(models)):
        raise _Refused("model: expected a model glob or a list of them (non-empty strings)")
    if when.git_remote is not None and not when.git_remote:
        raise _Refused("git_remote: expected a non-empty string")
    remote = when.git_remote
    return {
        "when": Conditions(
            providers=tuple(when.provider) if when.provider is not None else None,
            models=models,
            model_patterns=tuple(re.compile(fnmatch.translate(model)) for model in models or ()),
            git_remote=remote,
            remote_pattern=re.compile(fnmatch.translate(remote)) if remote and _GLOB_CHARS.search(remote) else None,
        )
    }


def _read_instructions(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    table = _convert(value, _InstructionsTable)
    if (table.text is None) == (table.file is None):
        raise _Refused("expected exactly one of text or file")
    if table.file is not None and not table.file:
        raise _Refused("file: expected a path")
    file = _path(table.file, base) if table.file is not None else None
    return {"instructions": InstructionsSource(table.mode, table.text, file)}


def _read_tools(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    table = _convert(value, _ToolsTable)
    if not all(table.include) or not all(table.exclude):
        raise _Refused("expected tool names (non-empty strings)")
    return {"include": tuple(dict.fromkeys(table.include)), "exclude": tuple(dict.fromkeys(table.exclude))}


def _read_skills(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    refs: list[SkillRef] = []
    for text in _convert(value, list[str]):
        root, colon, name = text.partition(":")
        if not colon or not root or not name:
            raise _Refused(f"expected ROOT:SKILL, got {text!r}")
        if root not in roots:
            known = ", ".join(sorted(roots)) or "none"
            raise _Refused(f"{text!r}: no [skills.roots.{root}] (declared: {known})")
        refs.append(SkillRef(root, name))
    return {"skills": tuple(dict.fromkeys(refs))}


def _read_env(value: Any, base: Path, roots: set[str]) -> dict[str, Any]:
    env = _convert(value, dict[str, str])
    bad = [name for name in env if not ENV_NAME.fullmatch(name)]
    if bad:
        raise _Refused(f"only BB_* names (BB_ then A-Z a-z 0-9 _): {', '.join(map(repr, bad))}")
    return {"env": env}


_READERS: dict[str, Callable[[Any, Path, set[str]], dict[str, Any]]] = {
    "id": _read_id,
    "scope": _read_scope,
    "when": _read_when,
    "instructions": _read_instructions,
    "tools": _read_tools,
    "skills": _read_skills,
    "env": _read_env,
}


# -- helpers -----------------------------------------------------------------------


def _convert(value: Any, type_: Any) -> Any:
    """`value` as `type_`, or a refusal with msgspec's reason (its `$` path made relative: "at `.text`")."""
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as exc:
        raise _Refused(str(exc).replace("`$", "`")) from None


def _path(text: str, base: Path) -> Path:
    """`text` with `~` expanded, relative to `base` (the file's directory) unless absolute."""
    return base / os.path.expanduser(text)


def path_glob(glob: str) -> re.Pattern[str]:
    """A path glob as a regex over a whole path: `*`, `?` within a segment, `**` across `/`, a trailing `/**` and
    an inner `/**/` also matching no segment, `[...]` a class (`[!...]` negated)."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("/**/", i):
            out.append("/(?:.*/)?")
            i += 4
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("(?:/.*)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and (end := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out), re.S)

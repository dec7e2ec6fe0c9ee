"""The skills of a skill root: each directory below it holding a `SKILL.md` whose front matter has a `name` and a
`description`. Its files are everything below that directory; its revision is the sha256 over them, in path order,
of each one's relative path, a NUL, its size (8 bytes, big-endian) and its bytes.

Nothing outside the root is ever read as a skill's: a symlink whose target leaves the root is refused (the skill
holding it is not listed, and the refusal is reported), and a symlink staying inside is followed only within a
skill (the walk for skills does not follow links, so a linked skill is found once, where it lives).

Resolution runs before every turn, so a root is indexed once per change: the index keeps the mtimes of the
directories it walked and of every `SKILL.md`, and is re-read when one differs; a skill's revision is kept with
the mtimes and sizes of its files.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bbridge.agents.config import SkillRootConfig
from bbridge.wire import protocol

SKILL_FILE = "SKILL.md"
SKILL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

SKILL_TOOL = protocol.DynamicTool(
    name="skill",
    description="Read a skill: the instructions it holds for a kind of task (its SKILL.md) and the list of its "
    "files. Give its name; an unknown name answers with the skills you may read.",
    inputSchema={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "the skill's name, or ROOT:NAME"}},
        "required": ["name"],
        "additionalProperties": False,
    },
)

Stamp = tuple[str, int, int]  # a path, its mtime (ns) and size


class SkillError(Exception):
    """A skill or root that cannot be used now; the message says why."""


@dataclass(frozen=True)
class Skill:
    root: str
    name: str
    description: str
    directory: Path
    files: tuple[str, ...]  # relative to `directory`, `/`-separated, in path order

    @property
    def ref(self) -> str:
        return f"{self.root}:{self.name}"


@dataclass(frozen=True)
class RootIndex:
    """A root's skills by name, what in it was refused (`PATH: why`), and the stamps that say it is current."""

    skills: Mapping[str, Skill]
    refused: tuple[str, ...]
    stamps: tuple[Stamp, ...]


class SkillRoots:
    """The configured roots' skills, each root indexed once per change and each revision hashed once per change."""

    def __init__(self, roots: Mapping[str, SkillRootConfig]) -> None:
        self.roots = roots
        self._indexes: dict[str, RootIndex] = {}
        self._revisions: dict[Path, tuple[tuple[Stamp, ...], str]] = {}

    def index(self, root: str) -> RootIndex:
        """The root's current index; a `SkillError` when it is not configured or its directory is unreadable."""
        config = self.roots.get(root)
        if config is None:
            raise SkillError(f"skill root {root!r} is not loaded (refused, or not declared)")
        cached = self._indexes.get(root)
        if cached is not None and all(_stamp(path) == (path, mtime, size) for path, mtime, size in cached.stamps):
            return cached
        try:
            self._indexes[root] = index = _Walk(config).index()
        except OSError as exc:
            raise SkillError(f"skill root {root!r}: {_why(exc)}") from None
        return index

    def skill(self, root: str, name: str) -> Skill:
        index = self.index(root)
        skill = index.skills.get(name)
        if skill is None:
            why = f" ({len(index.refused)} refused there: see `bbridge config check`)" if index.refused else ""
            raise SkillError(f"skill {root}:{name}: not in {self.roots[root].path}{why}")
        return skill

    def revision(self, skill: Skill) -> str:
        """The sha256 of the skill's files (hashed again only when one's mtime or size changed)."""
        try:
            stamps = tuple(_file_stamp(skill.directory, name) for name in skill.files)
            cached = self._revisions.get(skill.directory)
            if cached is not None and cached[0] == stamps:
                return cached[1]
            digest = hashlib.sha256()
            for name in skill.files:
                data = (skill.directory / name).read_bytes()
                digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + len(data).to_bytes(8, "big"))
                digest.update(data)
        except OSError as exc:
            raise SkillError(f"skill {skill.ref}: {_why(exc)}") from None
        self._revisions[skill.directory] = (stamps, digest.hexdigest())
        return digest.hexdigest()

    def read(self, skill: Skill) -> str:
        """The hosted `skill` tool's text: the SKILL.md as written, then where the skill is and its files."""
        try:
            text = (skill.directory / SKILL_FILE).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise SkillError(f"skill {skill.ref}: {_why(exc)}") from None
        files = "\n".join(f"- {name}" for name in skill.files)
        return f"{text.rstrip()}\n\n---\nSkill {skill.ref}, in {skill.directory}; its files:\n{files}\n"


class _Walk:
    """One indexing of a root."""

    def __init__(self, config: SkillRootConfig) -> None:
        self.config = config
        self.top = os.path.realpath(config.path)
        self.skills: dict[str, Skill] = {}
        self.refused: list[str] = []
        self.stamps: list[Stamp] = []

    def index(self) -> RootIndex:
        self._stamp(str(self.config.path))
        for entry in _entries(str(self.config.path)):
            self._visit(entry, entry.name)
        return RootIndex(dict(self.skills), tuple(self.refused), tuple(self.stamps))

    def _visit(self, entry: os.DirEntry[str], rel: str) -> None:
        """Below the root: a directory with a SKILL.md is a skill; any other is walked on. Links are not followed
        (what they point to inside the root is walked where it is), and one leaving the root is refused."""
        if entry.is_symlink():
            if not self._inside(entry.path):
                self.refused.append(f"{rel}: a symlink leaving the root")
            return
        if not entry.is_dir(follow_symlinks=False):
            return
        self._stamp(entry.path)
        entries = _entries(entry.path)
        if any(child.name == SKILL_FILE for child in entries):
            self._skill(Path(entry.path), rel)
            return
        for child in entries:
            self._visit(child, f"{rel}/{child.name}")

    def _skill(self, directory: Path, rel: str) -> None:
        files: list[str] = []
        self._stamp(str(directory / SKILL_FILE))
        try:
            if (problem := self._files(str(directory), "", files, set())) is not None:
                raise SkillError(problem)
            name, description = self._head(directory)
        except SkillError as exc:
            self.refused.append(f"{rel}: {exc}")
            return
        self.skills[name] = Skill(self.config.name, name, description, directory, tuple(sorted(files)))

    def _head(self, directory: Path) -> tuple[str, str]:
        """The skill's name and description, from its SKILL.md's front matter."""
        try:
            head = front_matter((directory / SKILL_FILE).read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            raise SkillError(f"{SKILL_FILE}: {_why(exc)}") from None
        name, description = head.get("name", ""), head.get("description")
        if not name or description is None:
            raise SkillError(f"{SKILL_FILE}: its front matter needs a name and a description")
        if not SKILL_NAME.fullmatch(name):
            raise SkillError(f"bad skill name {name!r} (expected 1 to 64 of A-Z a-z 0-9 . _ -, not starting . _ -)")
        if name in self.skills:
            raise SkillError(f"skill name {name!r} is taken by {self.skills[name].directory}")
        return name, description

    def _files(self, directory: str, rel: str, files: list[str], seen: set[str]) -> str | None:
        """A skill's files below `directory` into `files`; the first symlink leaving the root, if any."""
        real = os.path.realpath(directory)
        if real in seen:
            return None  # a link back up: its files are listed already
        seen.add(real)
        for entry in _entries(directory):
            path = f"{rel}{entry.name}"
            if entry.is_symlink() and not self._inside(entry.path):
                return f"{path}: a symlink leaving the root"
            if entry.is_dir():
                self._stamp(entry.path)
                if (problem := self._files(entry.path, f"{path}/", files, seen)) is not None:
                    return problem
            elif entry.is_file():
                files.append(path)
        return None

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self.top or real.startswith(self.top.rstrip(os.sep) + os.sep)

    def _stamp(self, path: str) -> None:
        self.stamps.append(_stamp(path))


def _entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as scan:
        return sorted(scan, key=lambda entry: entry.name)


def _stamp(path: str) -> Stamp:
    """`path`, its mtime and size (-1, -1 when it is gone: never equal to what was recorded)."""
    try:
        stat = os.stat(path)
    except OSError:
        return path, -1, -1
    return path, stat.st_mtime_ns, stat.st_size


def _file_stamp(directory: Path, name: str) -> Stamp:
    stat = (directory / name).stat()
    return name, stat.st_mtime_ns, stat.st_size


def _why(exc: OSError) -> str:
    return f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else str(exc)


# -- SKILL.md front matter ------------------------------------------------------------

_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*))?$")


def front_matter(text: str) -> dict[str, str]:
    """The `key: value` lines between a leading `---` line and the next: the simple YAML a SKILL.md opens with.

    A value may be quoted (single or double), continued on more-indented lines (folded with spaces), or a block
    (`|` keeps its lines, `>` folds them); nested mappings and lists are not read. No front matter: {}.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].rstrip() != "---":
        return {}
    values: dict[str, str] = {}
    key: str | None = None
    block: str | None = None  # "|" or ">" while a block scalar's lines are read
    for line in lines[1:]:
        if line.rstrip() in ("---", "..."):
            break
        if key is not None and (line[:1] in (" ", "\t") or (block and not line.strip())):
            piece = line.strip()
            joiner = "\n" if block == "|" else " "
            values[key] = f"{values[key]}{joiner}{piece}" if values[key] else piece
            continue
        match = _KEY.match(line)
        if match is None:
            key = block = None
            continue
        key, raw = match[1], (match[2] or "").strip()
        block = raw[0] if raw[:1] in ("|", ">") else None
        values[key] = "" if block else _scalar(raw)
    return {name: value.strip() for name, value in values.items()}


def _scalar(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'")
    return raw.split(" #", 1)[0].rstrip()

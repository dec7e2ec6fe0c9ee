"""Skills for the live tests: a skill root on disk, and the Claude Code plugin directory that loads one.

A skill is a directory holding a `SKILL.md` whose YAML front matter gives its `name` and `description`
(issue 47). Codex takes a skill root as is (`skills/extraRoots/set`: `<root>/<skill>/SKILL.md`); Claude Code
loads skills only from a plugin directory (`claude --plugin-dir DIR`, which the claude_code bridge passes for each
`skills/configure` root), so a root is first materialised as one by `claude_plugin_dir`. What the pinned CLI was
seen doing with such a directory is in `tests/live/NOTES.md` ("Skills").

`claude_plugin_dir` belongs with the daemon's agent configuration (`bbridge/agents/claude_plugin.py`): it lives here
until that package exists.
"""

from __future__ import annotations

import json
import os
import shutil
import unicodedata
from pathlib import Path

MANIFEST = Path(".claude-plugin") / "plugin.json"
# What the pinned CLI refuses in a plugin name (its `plugin_errors`: "must be non-empty and must not contain "@",
# ":", whitespace, path separators, or invisible/control characters"); a refused plugin is left out silently.
_REFUSED = frozenset("@:/\\")
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def write_skill(root: Path, name: str, description: str, body: str) -> Path:
    """`root/name/SKILL.md` with its front matter; the skill's directory."""
    skill = root / name
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n")
    return skill


def plugin_name(root_id: str) -> str:
    """The plugin name Claude Code accepts for a skill root: each refused character becomes `-`. The CLI names
    each skill `<plugin name>:<skill directory>`."""
    name = "".join("-" if c in _REFUSED or c.isspace() or unicodedata.category(c) in _INVISIBLE else c for c in root_id)
    return name.strip("-") or "skills"


def claude_plugin_dir(dest: Path, root_id: str, skills: dict[str, Path]) -> Path:
    """Make `dest` the Claude Code plugin directory of the skill root `root_id` whose skills are `skills` (the
    skill's name → its directory, which holds a `SKILL.md`); returns `dest`, the path `skills/configure` gives the
    claude_code bridge.

    The layout: `dest/.claude-plugin/plugin.json` (`{"name": plugin_name(root_id)}`) and `dest/skills/<name>`, a
    symlink to the skill's directory (the CLI follows it, and reads the files where they are, so an edited skill
    is seen by the next CLI started). Running it again brings `dest` up to date: the manifest and each link are
    replaced atomically, and what `skills` no longer names is removed from `dest/skills`. A name that is not one
    plain path component, or a directory without a `SKILL.md`, is refused with `ValueError` before anything is
    written."""
    targets: dict[str, Path] = {}
    for name, source in skills.items():
        if name in ("", ".", "..") or "/" in name or "\0" in name or name.startswith("."):
            raise ValueError(f"skill name {name!r} is not one plain path component")
        if not (source / "SKILL.md").is_file():
            raise ValueError(f"skill {name!r}: {source} holds no SKILL.md")
        targets[name] = source.resolve()
    manifest = dest / MANIFEST
    manifest.parent.mkdir(parents=True, exist_ok=True)
    _replace_text(manifest, json.dumps({"name": plugin_name(root_id)}) + "\n")
    folder = dest / "skills"
    folder.mkdir(exist_ok=True)
    for entry in folder.iterdir():
        if entry.name not in targets:
            _remove(entry)
    for name, target in targets.items():
        link = folder / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.exists() and not link.is_symlink():
            _remove(link)  # a directory cannot be replaced by a link atomically
        staged = folder / f".{name}.new"
        _remove(staged)
        staged.symlink_to(target, target_is_directory=True)
        os.replace(staged, link)
    return dest


def _replace_text(path: Path, text: str) -> None:
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text)
    os.replace(staged, path)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)

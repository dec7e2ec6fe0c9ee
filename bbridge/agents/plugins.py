"""A skill root as a bridge loads it, made under the daemon's state directory from the skills indexing accepted
(a skill refused for leaving its root is never linked, so no agent sees it).

* Claude Code loads skills only from a local plugin directory (`claude --plugin-dir DIR`, protocol.md §3.3.13's
  "local-plugin path"): `DIR/.claude-plugin/plugin.json` (`{"name": …}`) and `DIR/skills/<skill>/SKILL.md`. The
  CLI names each skill `<plugin name>:<skill directory>`, so the plugin is named for the root (`team:review`, as
  `[[agents]] skills` writes it), and it refuses a name with `@`, `:`, whitespace, a path separator or an invisible
  character by leaving the plugin out silently (`plugin_name` replaces those).
* The other bridges (Codex's `skills/extraRoots/set`, pi's `--skill`) take a directory of skill directories.

Each skill is a symlink to its own directory (the CLIs follow it: tests/test_skills_live.py), so an edited skill
reaches the next agent started without a copy. Running again brings a directory up to date: links replaced
atomically, those of skills gone removed.
"""

from __future__ import annotations

import json
import os
import shutil
import unicodedata
from collections.abc import Mapping
from pathlib import Path

MANIFEST = Path(".claude-plugin") / "plugin.json"
_REFUSED = frozenset("@:/\\")
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def plugin_name(root_id: str) -> str:
    """The plugin name Claude Code accepts for a skill root: each character it refuses becomes `-`."""
    name = "".join("-" if c in _REFUSED or c.isspace() or unicodedata.category(c) in _INVISIBLE else c for c in root_id)
    return name.strip("-") or "skills"


def claude_plugin_dir(dest: Path, root_id: str, skills: Mapping[str, Path]) -> Path:
    """`dest` made the Claude Code plugin directory of the root `root_id` whose skills are `skills` (each name's
    directory, holding a `SKILL.md`); `ValueError` for a name that is not one plain path component or a directory
    without a `SKILL.md`, before anything is written."""
    targets = _targets(skills)
    _write(dest / MANIFEST, json.dumps({"name": plugin_name(root_id)}) + "\n")
    _link_all(dest / "skills", targets)
    return dest


def linked_root(dest: Path, skills: Mapping[str, Path]) -> Path:
    """`dest` made a skill root of links, one per skill (checked as `claude_plugin_dir` checks them)."""
    _link_all(dest, _targets(skills))
    return dest


def _targets(skills: Mapping[str, Path]) -> dict[str, Path]:
    targets: dict[str, Path] = {}
    for name, source in skills.items():
        if name in ("", ".", "..") or "/" in name or "\0" in name or name.startswith("."):
            raise ValueError(f"skill name {name!r} is not one plain path component")
        if not (source / "SKILL.md").is_file():
            raise ValueError(f"skill {name!r}: {source} holds no SKILL.md")
        targets[name] = source.resolve()
    return targets


def _link_all(folder: Path, targets: Mapping[str, Path]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
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


def _write(path: Path, text: str) -> None:
    """`text` into `path` unless it holds it already, replaced whole (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)

"""A skill root as Claude Code loads it: a local plugin directory (`claude --plugin-dir DIR`), protocol.md §3.3.13's
"local-plugin path". The layout assumed: `DIR/.claude-plugin/plugin.json` (the manifest) and `DIR/skills/NAME/`
holding each skill's `SKILL.md`; each `skills/NAME` is a symlink to the skill's own directory, so an edit reaches
the agent without copying. Kept to this one function, so the layout is changed in one place if the CLI wants
another.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path


def claude_plugin_dir(root: str, skills: Mapping[str, Path], state_dir: Path) -> Path:
    """The plugin directory of `root` under `state_dir`, made or brought up to date: its manifest, and one link
    per skill (`skills`: each name's directory), links of skills no longer there removed."""
    plugin = state_dir / "claude-plugins" / root
    manifest = {
        "name": "bb-" + (re.sub(r"[^a-z0-9-]+", "-", root.lower()).strip("-") or "skills"),
        "description": f"bbridge skill root {root!r}",
        "version": "1.0.0",
    }
    _write(plugin / ".claude-plugin" / "plugin.json", json.dumps(manifest, indent=2) + "\n")
    links = plugin / "skills"
    links.mkdir(parents=True, exist_ok=True)
    for entry in links.iterdir():
        if entry.name not in skills:
            _remove(entry)
    for name, directory in skills.items():
        link = links / name
        if link.is_symlink() and os.readlink(link) == str(directory):
            continue
        temporary = links / f".{name}.new"
        _remove(temporary)
        temporary.symlink_to(directory, target_is_directory=True)
        if link.exists() and not link.is_symlink():
            _remove(link)  # os.replace cannot put a link over a directory
        os.replace(temporary, link)
    return plugin


def _write(path: Path, text: str) -> None:
    """`text` into `path` unless it holds it already, replaced whole (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)

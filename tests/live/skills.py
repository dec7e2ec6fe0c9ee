"""Skills for the live tests: a skill root on disk, and the Claude Code plugin directory that loads one.

A skill is a directory holding a `SKILL.md` whose YAML front matter gives its `name` and `description`
(issue 47). Codex takes a skill root as is (`skills/extraRoots/set`: `<root>/<skill>/SKILL.md`); Claude Code
loads skills only from a plugin directory (`claude --plugin-dir DIR`, which the claude_code bridge passes for each
`skills/configure` root), so a root is first materialised as one by `claude_plugin_dir`. What the pinned CLI was
seen doing with such a directory is in `tests/live/NOTES.md` ("Skills").

`claude_plugin_dir` is the daemon's own (`bbridge/agents/plugins.py`), which `[skills.roots]` uses for Claude Code.
"""

from __future__ import annotations

from pathlib import Path

from bbridge.agents.plugins import MANIFEST, claude_plugin_dir, plugin_name

__all__ = ["MANIFEST", "claude_plugin_dir", "plugin_name", "write_skill"]


def write_skill(root: Path, name: str, description: str, body: str) -> Path:
    """`root/name/SKILL.md` with its front matter; the skill's directory."""
    skill = root / name
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n")
    return skill

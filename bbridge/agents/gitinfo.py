"""A cwd's git work tree and its `origin` remote URL, read from the files git keeps, with no `git` process: this
runs before every turn.

The work tree's root is the nearest directory at or above the cwd holding `.git`: a directory, or a file saying
`gitdir: PATH` (a linked worktree's, or a submodule's). A linked worktree's git directory names the repository's
common one in its `commondir` file, where `config` (and its remotes) lives. A config file is parsed once per
change: cached by its path, mtime and size.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

_CACHE_BOUND = 256
_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_VARIABLE = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")
_URL = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/]*@)?([^/:]*)(?::[0-9]*)?/?(.*)$"
)  # scheme://[user@]host[:port]/path
_SCP = re.compile(r"(?:[^@/:]*@)?([^/:]+):(?!//)(.*)$")  # [user@]host:path, ssh's scp-like form


@dataclass(frozen=True)
class GitInfo:
    """What a cwd's git work tree says: its root and its `origin` remote's URL (None: not known)."""

    root: str | None = None
    remote: str | None = None


class GitInfoCache:
    """`lookup(cwd)`: the work tree found by walking up (a few `stat`s), its config parsed once per change."""

    def __init__(self) -> None:
        self._configs: OrderedDict[str, tuple[tuple[int, int], str | None]] = OrderedDict()

    def lookup(self, cwd: str) -> GitInfo:
        found = _work_tree(Path(cwd))
        if found is None:
            return GitInfo()
        root, config = found
        return GitInfo(str(root), self._origin(config) if config is not None else None)

    def _origin(self, config: Path) -> str | None:
        try:
            stat = config.stat()
        except OSError:
            return None
        key, stamp = str(config), (stat.st_mtime_ns, stat.st_size)
        cached = self._configs.get(key)
        if cached is not None and cached[0] == stamp:
            self._configs.move_to_end(key)
            return cached[1]
        try:
            url = origin_url(config.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None
        self._configs[key] = (stamp, url)
        if len(self._configs) > _CACHE_BOUND:
            self._configs.popitem(last=False)
        return url


def _work_tree(cwd: Path) -> tuple[Path, Path | None] | None:
    """The work tree's root at or above `cwd` and its config file (None: its git directory unreadable)."""
    directory = Path(os.path.abspath(cwd))
    for candidate in (directory, *directory.parents):
        dot_git = candidate / ".git"
        if dot_git.is_dir():
            return candidate, _config_of(dot_git)
        if dot_git.is_file():
            git_dir = _gitdir_file(dot_git)
            return candidate, _config_of(git_dir) if git_dir is not None else None
    return None


def _gitdir_file(dot_git: Path) -> Path | None:
    """The git directory a `.git` file names (`gitdir: PATH`, relative to the file's directory)."""
    try:
        line = dot_git.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not line.startswith("gitdir:"):
        return None
    return dot_git.parent / line.removeprefix("gitdir:").strip()


def _config_of(git_dir: Path) -> Path:
    """The config of the repository `git_dir` belongs to: its `commondir`'s for a linked worktree."""
    try:
        common = (git_dir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return git_dir / "config"
    return (git_dir / common / "config") if common else git_dir / "config"


def origin_url(text: str) -> str | None:
    """`remote.origin.url` of a git config file's text (its last value, as git takes it), or None."""
    url: str | None = None
    in_origin = False
    for raw in text.splitlines():
        line = _uncomment(raw)
        if not line.strip():
            continue
        if section := _SECTION.match(line):
            name, sub, rest = section.groups()
            in_origin = (name.lower(), sub) == ("remote", "origin") or name.lower() == "remote.origin"
            line = rest
            if not line.strip():
                continue
        variable = _VARIABLE.match(line)
        if in_origin and variable is not None and variable[1].lower() == "url" and variable[2] is not None:
            url = _unquote(variable[2].strip())
    return url or None


def remote_forms(url: str) -> tuple[str, ...]:
    """The URL as written and its `HOST/PATH` form, which an https URL and an scp-style ssh one share:
    `https://github.com/acme/x.git`, `ssh://git@github.com/acme/x.git` and `git@github.com:acme/x.git` are all
    `github.com/acme/x.git`, so that one `git_remote` condition matches a remote however it is cloned."""
    match = _URL.match(url) or _SCP.match(url)
    plain = f"{match[1]}/{match[2]}" if match else url
    return (url,) if plain == url else (url, plain)


def redact_remote(url: str) -> str:
    """The URL as shown (a reason, `config explain`): a password in it replaced by `***`."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^@/:]*):[^@/]*@", r"\1:***@", url)


def _uncomment(line: str) -> str:
    """`line` without a `#` or `;` comment outside double quotes."""
    quoted = False
    for i, char in enumerate(line):
        if char == '"' and (i == 0 or line[i - 1] != "\\"):
            quoted = not quoted
        elif char in "#;" and not quoted:
            return line[:i]
    return line


def _unquote(value: str) -> str:
    """A config value with its double quotes removed and `\\"`, `\\\\` unescaped."""
    return re.sub(r'\\(["\\])|"', lambda match: match[1] or "", value).strip()

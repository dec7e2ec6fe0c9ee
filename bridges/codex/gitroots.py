"""Git writable roots (spec §2.5): the git directories codex needs to commit from a linked worktree.

Codex's workspace-write sandbox keeps `.git` read-only, so in a linked worktree (a `.git` *file*) a commit
fails unless the worktree's gitdir and the shared object and ref stores are granted explicitly. Granting
anything outside the repository would widen the sandbox, so every granted path is resolved through symlinks,
the one-line files read on the way are never followed through one, and any step that does not look exactly like
what `git worktree add` writes yields `[]` (never an exception).

Choices where the spec leaves room, made so that committing works and nothing more is opened:

* Shared refs (branches) live in the common dir, so their parent directories are taken under `<common>/refs`
  and `<common>/logs/refs`. Per-worktree refs (`refs/worktree/`, `refs/bisect/`, `refs/rewritten/`) live in
  the gitdir, which is already a root, so they add nothing.
* "The existing parent directory" is the nearest existing ancestor of the ref file strictly below `refs/`
  (resp. `logs/refs/`): a branch `feat/x` whose `refs/heads/feat/` is missing (packed refs, or a first
  reflog) needs `refs/heads/` to create it. If none exists, nothing is added for that store.
* A HEAD that is neither a safe `ref: refs/...` nor a 40/64-hex id (missing, `ref: heads/main`, a
  backslash, a `..` segment) is not a repository git would accept, so it yields `[]`, like any escape.
* `objects` must be a real directory of the common dir (not a symlink, even to a place inside it), and the
  gitdir a direct child of `<common>/worktrees`: a symlink to `hooks/` would let codex plant code run outside
  the sandbox.
"""

from __future__ import annotations

import os
import re
import stat

_MAX_BYTES = 8192  # a path of PATH_MAX (4096) plus its prefix; real files are one short line
_HEX_ID = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
_PER_WORKTREE = ("refs/worktree/", "refs/bisect/", "refs/rewritten/")


class _NotLinked(Exception):
    """`cwd` is not a linked worktree git would accept, or a path escapes its trusted parent."""


def git_roots(cwd: str) -> list[str]:
    """The resolved writable roots of the linked worktree at `cwd`; `[]` for anything else."""
    try:
        return _roots(cwd)
    except (_NotLinked, OSError, ValueError):  # ValueError: NUL bytes in a path, undecodable contents
        return []


def _roots(cwd: str) -> list[str]:
    dot_git = os.path.join(cwd, ".git")
    gitdir = _directory(os.path.join(cwd, _line(dot_git, "gitdir: ")))
    back_link = os.path.join(gitdir, _line(os.path.join(gitdir, "gitdir")))
    if os.path.realpath(back_link, strict=True) != os.path.realpath(dot_git, strict=True):
        raise _NotLinked
    common = _directory(os.path.join(gitdir, _line(os.path.join(gitdir, "commondir"))))
    objects = os.path.join(common, "objects")
    if os.path.dirname(gitdir) != os.path.join(common, "worktrees") or _directory(objects) != objects:
        raise _NotLinked
    roots = [gitdir, objects]
    head = _line(os.path.join(gitdir, "HEAD"))
    if _HEX_ID.fullmatch(head):
        segments = ["heads"]  # a detached HEAD: where a branch made from here goes
    elif head.startswith("ref: ") and _safe(ref := head.removeprefix("ref: ")):
        if ref.startswith(_PER_WORKTREE):
            return roots
        segments = ref.split("/")[1:-1]
    else:
        raise _NotLinked
    for store in (common, os.path.join(common, "logs")):
        found = _existing_parent(os.path.join(store, "refs"), segments)
        if found is not None:
            roots.append(found)
    return roots


def _existing_parent(tree: str, segments: list[str]) -> str | None:
    """The deepest existing `tree/segments[:n]` (n >= 1) if it is a directory; it must resolve strictly inside
    `tree`, so a symlink to `.` or out of the ref store is an escape."""
    for n in range(len(segments), 0, -1):
        candidate = os.path.join(tree, *segments[:n])
        if os.path.lexists(candidate):
            resolved = os.path.realpath(candidate, strict=True)
            if os.path.commonpath([resolved, tree]) != tree or resolved == tree:
                raise _NotLinked
            return resolved if os.path.isdir(resolved) else None
    return None


def _safe(ref: str) -> bool:
    segments = ref.split("/")
    return ref.startswith("refs/") and "\\" not in ref and not {"", ".", ".."} & set(segments)


def _directory(path: str) -> str:
    """`path` resolved through every symlink; it must be an existing directory (a loop or a dangling link raises)."""
    resolved = os.path.realpath(path, strict=True)
    if not os.path.isdir(resolved):
        raise _NotLinked
    return resolved


def _line(path: str, prefix: str = "") -> str:
    """The first line of the small regular file `path` after `prefix` (which must be there), never following a
    symlink nor blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotLinked
        data = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        raise _NotLinked
    line = data.decode().split("\n", 1)[0].removesuffix("\r")
    if not line.startswith(prefix):
        raise _NotLinked
    return line.removeprefix(prefix)

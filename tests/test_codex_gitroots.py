"""Git writable roots (spec §2.5): real linked worktrees made by the `git` CLI, and hostile trees made by
breaking one of them in a single way, so each `[]` below is caused by that one change."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridges.codex.gitroots import git_roots

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the git CLI is not installed")

SHA1 = "3a99468a3737a6438e561d6d8451b28af935d183"


def git(cwd: Path, *args: str) -> None:
    """Run git isolated from the user's and the system's configuration."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@dataclass
class Repo:
    main: Path  # the main worktree
    common: Path  # its .git directory, the common dir of every linked worktree
    wt: Path  # linked worktree on branch feat/x
    gitdir: Path  # wt's gitdir
    det: Path  # linked worktree with a detached HEAD


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    root = tmp_path.resolve()
    main = root / "main"
    git(root, "init", "-q", "-b", "main", str(main))
    git(main, "commit", "-q", "--allow-empty", "-m", "first")
    git(main, "worktree", "add", "-q", "-b", "feat/x", str(root / "wt"))
    git(main, "worktree", "add", "-q", "--detach", str(root / "det"))
    common = main / ".git"
    return Repo(main, common, root / "wt", common / "worktrees" / "wt", root / "det")


def expected(repo: Repo, *extra: str) -> list[str]:
    return [str(repo.gitdir), str(repo.common / "objects"), *(str(repo.common / path) for path in extra)]


BRANCH_ROOTS = ("refs/heads/feat", "logs/refs/heads/feat")


# Real worktrees.


def test_branch_head_grants_the_branch_ref_and_reflog_directories(repo: Repo) -> None:
    assert git_roots(str(repo.wt)) == expected(repo, *BRANCH_ROOTS)


def test_flat_branch_grants_refs_heads(repo: Repo) -> None:
    git(repo.main, "worktree", "add", "-q", "-b", "topic", str(repo.wt.parent / "topic"))
    repo.gitdir = repo.common / "worktrees" / "topic"
    assert git_roots(str(repo.wt.parent / "topic")) == expected(repo, "refs/heads", "logs/refs/heads")


def test_detached_head_grants_refs_heads(repo: Repo) -> None:
    repo.gitdir = repo.common / "worktrees" / "det"
    assert git_roots(str(repo.det)) == expected(repo, "refs/heads", "logs/refs/heads")


def test_detached_sha256_head(repo: Repo) -> None:
    (repo.gitdir / "HEAD").write_text("ab" * 32 + "\n")
    assert git_roots(str(repo.wt)) == expected(repo, "refs/heads", "logs/refs/heads")


def snapshot(tree: Path) -> dict[Path, tuple[int, int]]:
    return {path: (path.stat().st_mtime_ns, path.stat().st_size) for path in tree.rglob("*")}


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_commit_writes_only_inside_the_roots(repo: Repo, packed: bool) -> None:
    """The production property: everything `git commit` creates or changes in the repository is granted.
    Packed, `refs/heads/feat/` is gone, so git must be able to create it inside `refs/heads/`."""
    if packed:
        git(repo.main, "pack-refs", "--all")
        assert not (repo.common / "refs/heads/feat").exists()
    roots = [Path(root) for root in git_roots(str(repo.wt))]
    assert roots == [
        Path(path) for path in expected(repo, "refs/heads" if packed else BRANCH_ROOTS[0], BRANCH_ROOTS[1])
    ]
    before = snapshot(repo.common)
    (repo.wt / "file").write_text("content\n")
    git(repo.wt, "add", "file")
    git(repo.wt, "commit", "-q", "-m", "second")
    after = snapshot(repo.common)
    written = [path for path, state in after.items() if before.get(path) != state and path.is_file()]
    assert any(path.is_relative_to(repo.common / "objects") for path in written)
    assert repo.common / "refs/heads/feat/x" in written
    assert [path for path in written if not any(path.is_relative_to(root) for root in roots)] == []


def test_relative_paths_and_crlf(repo: Repo) -> None:
    (repo.wt / ".git").write_bytes(b"gitdir: ../main/.git/worktrees/wt\r\n")
    (repo.gitdir / "gitdir").write_text("../../../../wt/.git\n")
    assert git_roots(str(repo.wt)) == expected(repo, *BRANCH_ROOTS)


def test_cwd_reached_through_a_symlink(repo: Repo) -> None:
    link = repo.wt.parent / "link"
    link.symlink_to(repo.wt)
    assert git_roots(str(link)) == expected(repo, *BRANCH_ROOTS)


def test_per_worktree_ref_adds_nothing_beyond_the_gitdir(repo: Repo) -> None:
    (repo.common / "refs/worktree").mkdir()
    (repo.gitdir / "HEAD").write_text("ref: refs/worktree/x\n")
    assert git_roots(str(repo.wt)) == expected(repo)


def test_missing_ref_directories_are_skipped(repo: Repo) -> None:
    shutil.rmtree(repo.common / "logs")
    assert git_roots(str(repo.wt)) == expected(repo, BRANCH_ROOTS[0])


def test_ref_directory_that_is_a_file_is_skipped(repo: Repo) -> None:
    (repo.gitdir / "HEAD").write_text("ref: refs/heads/main/y\n")
    assert git_roots(str(repo.wt)) == expected(repo)


# Not linked worktrees.


def test_plain_repository(repo: Repo) -> None:
    assert git_roots(str(repo.main)) == []


def test_not_a_repository(tmp_path: Path) -> None:
    assert git_roots(str(tmp_path)) == []
    assert git_roots(str(tmp_path / "missing")) == []


# Hostile trees: one change to a valid worktree each.


def test_gitdir_does_not_exist(repo: Repo) -> None:
    (repo.wt / ".git").write_text(f"gitdir: {repo.common}/worktrees/nope\n")
    assert git_roots(str(repo.wt)) == []


def test_missing_back_link(repo: Repo) -> None:
    (repo.gitdir / "gitdir").unlink()
    assert git_roots(str(repo.wt)) == []


def test_back_link_naming_another_dot_git(repo: Repo) -> None:
    (repo.gitdir / "gitdir").write_text(f"{repo.det}/.git\n")
    assert git_roots(str(repo.wt)) == []


def test_commondir_escaping_via_symlink(repo: Repo, tmp_path: Path) -> None:
    """The common dir resolves to a look-alike that does not hold the gitdir."""
    fake = tmp_path / "fake"
    (fake / "objects").mkdir(parents=True)
    (fake / "worktrees").mkdir()
    (repo.common / "escape").symlink_to(fake)
    (repo.gitdir / "commondir").write_text("../../escape\n")
    assert git_roots(str(repo.wt)) == []


def test_missing_commondir(repo: Repo) -> None:
    (repo.gitdir / "commondir").unlink()
    assert git_roots(str(repo.wt)) == []


@pytest.mark.parametrize("where", ["elsewhere/wt", "worktrees/nested/wt"])
def test_gitdir_not_directly_inside_common_worktrees(repo: Repo, where: str) -> None:
    moved = repo.common / where
    moved.parent.mkdir()
    repo.gitdir.rename(moved)
    (moved / "commondir").write_text(os.path.relpath(repo.common, moved) + "\n")
    (repo.wt / ".git").write_text(f"gitdir: {moved}\n")
    assert git_roots(str(repo.wt)) == []


def test_worktrees_directory_is_a_symlink(repo: Repo, tmp_path: Path) -> None:
    (repo.common / "worktrees").rename(tmp_path / "worktrees")
    (repo.common / "worktrees").symlink_to(tmp_path / "worktrees")
    (tmp_path / "worktrees/wt/commondir").write_text(f"{repo.common}\n")
    assert git_roots(str(repo.wt)) == []


@pytest.mark.parametrize("file", [False, True], ids=["missing", "a file"])
def test_no_objects_directory(repo: Repo, file: bool) -> None:
    (repo.common / "objects").rename(repo.common / "objects.old")
    if file:
        (repo.common / "objects").write_text("")
    assert git_roots(str(repo.wt)) == []


def test_objects_is_a_symlink_inside_the_common_dir(repo: Repo) -> None:
    (repo.common / "objects").rename(repo.common / "objects.old")
    (repo.common / "objects").symlink_to(repo.common / "hooks")
    assert git_roots(str(repo.wt)) == []


@pytest.mark.parametrize(
    "head",
    [
        "ref: refs/../x",
        "ref: heads/main",
        "ref: refs/heads\\main",
        "ref: refs//heads/main",
        "ref: refs/heads/./x",
        "ref: refs/heads/",
        "ref:refs/heads/main",
        SHA1[:-1],
        SHA1 + "0",
        "",
    ],
)
def test_unsafe_or_invalid_head(repo: Repo, head: str) -> None:
    (repo.gitdir / "HEAD").write_text(head + "\n")
    assert git_roots(str(repo.wt)) == []


@pytest.mark.parametrize("store", ["refs/heads/feat", "logs/refs/heads/feat"])
def test_ref_directory_escaping_via_symlink(repo: Repo, store: str, tmp_path: Path) -> None:
    shutil.rmtree(repo.common / store)
    (repo.common / store).symlink_to(tmp_path)
    assert git_roots(str(repo.wt)) == []


def test_ref_directory_symlinked_to_another_part_of_the_repository(repo: Repo) -> None:
    shutil.rmtree(repo.common / "refs/heads/feat")
    (repo.common / "refs/heads/feat").symlink_to(repo.common / "hooks")
    assert git_roots(str(repo.wt)) == []


def test_ref_directory_symlinked_to_the_ref_store_itself(repo: Repo) -> None:
    shutil.rmtree(repo.common / "refs/heads/feat")
    (repo.common / "refs/heads/feat").symlink_to(repo.common / "refs")
    assert git_roots(str(repo.wt)) == []


def test_dangling_ref_directory_symlink(repo: Repo, tmp_path: Path) -> None:
    shutil.rmtree(repo.common / "refs/heads/feat")
    (repo.common / "refs/heads/feat").symlink_to(tmp_path / "nowhere")
    assert git_roots(str(repo.wt)) == []


def test_dot_git_is_a_symlink_to_a_valid_file(repo: Repo, tmp_path: Path) -> None:
    (repo.wt / ".git").rename(tmp_path / "dotgit")
    (repo.wt / ".git").symlink_to(tmp_path / "dotgit")
    assert git_roots(str(repo.wt)) == []


def test_dot_git_is_a_fifo(repo: Repo) -> None:
    """Neither blocks with no writer nor reads what a writer offers."""
    content = (repo.wt / ".git").read_bytes()
    (repo.wt / ".git").unlink()
    os.mkfifo(repo.wt / ".git")
    assert git_roots(str(repo.wt)) == []
    writer = os.open(repo.wt / ".git", os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(writer, content)
        assert git_roots(str(repo.wt)) == []
    finally:
        os.close(writer)


def test_dot_git_is_huge(repo: Repo) -> None:
    """A valid first line followed by a megabyte: rejected rather than read."""
    with (repo.wt / ".git").open("ab") as file:
        file.write(b"x" * 1_000_000)
    assert git_roots(str(repo.wt)) == []


def test_non_utf8_gitdir_path(repo: Repo) -> None:
    """The bytes name a real link to the gitdir, so only the decoding rejects them."""
    link = os.path.join(os.fsencode(repo.wt.parent), b"\xff")
    os.symlink(repo.gitdir, link)
    (repo.wt / ".git").write_bytes(b"gitdir: " + link + b"\n")
    assert git_roots(str(repo.wt)) == []


def test_non_utf8_head(repo: Repo) -> None:
    (repo.gitdir / "HEAD").write_bytes(b"ref: refs/heads/feat/x\xff\n")
    assert git_roots(str(repo.wt)) == []


def test_symlink_loop(repo: Repo) -> None:
    loop = repo.wt.parent / "loop"
    loop.symlink_to(loop)
    (repo.wt / ".git").write_text(f"gitdir: {loop}\n")
    assert git_roots(str(repo.wt)) == []


def test_nul_byte_in_a_path(repo: Repo) -> None:
    (repo.wt / ".git").write_bytes(f"gitdir: {repo.gitdir}\0\n".encode())
    assert git_roots(str(repo.wt)) == []


def test_head_is_a_directory(repo: Repo) -> None:
    (repo.gitdir / "HEAD").unlink()
    (repo.gitdir / "HEAD").mkdir()
    assert git_roots(str(repo.wt)) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_head(repo: Repo) -> None:
    (repo.gitdir / "HEAD").chmod(0)
    assert git_roots(str(repo.wt)) == []

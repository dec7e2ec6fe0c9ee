"""Skill roots and git work trees, as the agents' configuration reads them (issue 47): a skill is a directory with
a SKILL.md whose front matter names and describes it, its revision the sha256 of its files; nothing leaving its
root is read (a symlink out refuses its skill); both are read once per change. A cwd's work tree and origin remote
come from the files git keeps (a worktree's `.git` file too), with no git process."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bbridge.agents import gitinfo
from bbridge.agents.config import SkillRootConfig
from bbridge.agents.gitinfo import GitInfo, GitInfoCache, origin_url, remote_forms
from bbridge.agents.skills import SkillError, SkillRoots, front_matter
from tests.test_agents_config import make_skill

# -- front matter ------------------------------------------------------------------------------------------------------


def test_front_matter_of_a_skill() -> None:
    text = """---
name: review-checklist
description: "Review a change: the checklist"
license: 'it''s MIT'
allowed-tools: [Read, Grep]
---
# Body
name: not this
"""
    assert front_matter(text) == {
        "name": "review-checklist",
        "description": "Review a change: the checklist",
        "license": "it's MIT",
        "allowed-tools": "[Read, Grep]",
    }


def test_front_matter_folded_literal_and_continued_values() -> None:
    text = (
        "\ufeff---\nname: x # a comment\ndescription: >\n  one\n  two\nnotes: |\n  a\n  b\nlong: first\n  second\n---\n"
    )
    assert front_matter(text) == {"name": "x", "description": "one two", "notes": "a\nb", "long": "first second"}


@pytest.mark.parametrize("text", ["", "# no front matter\n", "name: x\n", "--- \n"])
def test_no_front_matter(text: str) -> None:
    assert front_matter(text) == {}


# -- indexing a root ---------------------------------------------------------------------------------------------------


def roots(tmp_path: Path, path: Path | None = None) -> SkillRoots:
    return SkillRoots({"team": SkillRootConfig("team", path or tmp_path / "team")})


def test_every_skill_below_the_root_is_found_and_its_files_listed(tmp_path: Path) -> None:
    root = tmp_path / "team"
    make_skill(root, "review", "review", "Review a change.")
    nested = make_skill(root, "group/deploy", "deploy", "Deploy.")
    (nested / "scripts").mkdir()
    (nested / "scripts" / "go.sh").write_text("echo go\n", encoding="utf-8")
    make_skill(nested, "scripts/inner", "inner")  # inside a skill: its files, not a skill of its own
    (root / "README.md").write_text("not a skill\n", encoding="utf-8")
    index = roots(tmp_path).index("team")
    assert {name: (s.directory, s.description) for name, s in index.skills.items()} == {
        "review": (root / "review", "Review a change."),
        "deploy": (nested, "Deploy."),
    }
    assert index.skills["deploy"].files == ("SKILL.md", "scripts/go.sh", "scripts/inner/SKILL.md")
    assert index.refused == ()


def test_a_skill_without_a_name_or_description_a_bad_name_or_a_taken_one_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "team"
    (root / "anonymous").mkdir(parents=True)
    (root / "anonymous" / "SKILL.md").write_text("---\ndescription: d\n---\n", encoding="utf-8")
    make_skill(root, "a", "twice")
    make_skill(root, "b", "twice")
    make_skill(root, "c", "has/slash")
    index = roots(tmp_path).index("team")
    assert list(index.skills) == ["twice"]
    assert index.refused == (
        "anonymous: SKILL.md: its front matter needs a name and a description",
        f"b: skill name 'twice' is taken by {root / 'a'}",
        "c: bad skill name 'has/slash' (expected 1 to 64 of A-Z a-z 0-9 . _ -, not starting . _ -)",
    )


def test_a_symlink_leaving_the_root_refuses_its_skill(tmp_path: Path) -> None:
    root = tmp_path / "team"
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret").write_text("secret\n", encoding="utf-8")
    make_skill(root, "kept", "kept")
    (make_skill(root, "file-link", "file-link") / "notes").symlink_to(outside / "secret")
    (make_skill(root, "dir-link", "dir-link") / "sub").mkdir()
    (root / "dir-link" / "sub" / "more").symlink_to(outside / "dir")
    (root / "skill-md-link").mkdir()
    (root / "skill-md-link" / "SKILL.md").symlink_to(outside / "secret")
    (root / "linked-skill").symlink_to(outside)
    index = roots(tmp_path).index("team")
    assert list(index.skills) == ["kept"]
    assert sorted(index.refused) == [
        "dir-link: sub/more: a symlink leaving the root",
        "file-link: notes: a symlink leaving the root",
        "linked-skill: a symlink leaving the root",
        "skill-md-link: SKILL.md: a symlink leaving the root",
    ]


def test_a_symlink_staying_inside_the_root_is_followed_within_a_skill(tmp_path: Path) -> None:
    root = tmp_path / "team"
    shared = root / "shared"
    shared.mkdir(parents=True)
    (shared / "common.md").write_text("common\n", encoding="utf-8")
    skill = make_skill(root, "review", "review")
    (skill / "common.md").symlink_to(shared / "common.md")
    (skill / "shared").symlink_to(shared)
    (skill / "loop").symlink_to(skill)  # a link back up is listed once
    (root / "alias").symlink_to(skill)  # the same skill again, under another name: found once, where it is
    linked_root = tmp_path / "link-to-team"
    linked_root.symlink_to(root)  # the root itself through a link
    index = roots(tmp_path, linked_root).index("team")
    assert list(index.skills) == ["review"] and index.refused == ()
    assert index.skills["review"].files == ("SKILL.md", "common.md", "shared/common.md")


def test_the_revision_is_the_sha256_of_the_files_paths_and_bytes_in_path_order(tmp_path: Path) -> None:
    skill = make_skill(tmp_path / "team", "review", "review")
    (skill / "a.txt").write_bytes(b"alpha")
    skill_md = (skill / "SKILL.md").read_bytes()
    expected = hashlib.sha256()
    for name, data in (("SKILL.md", skill_md), ("a.txt", b"alpha")):
        expected.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    found = roots(tmp_path)
    assert found.revision(found.skill("team", "review")) == expected.hexdigest()


def test_a_root_is_indexed_and_a_revision_hashed_once_per_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skill = make_skill(tmp_path / "team", "review", "review")
    found = roots(tmp_path)
    hashed: list[object] = []
    real = hashlib.sha256

    def counted() -> Any:
        hashed.append(1)
        return real()

    monkeypatch.setattr(hashlib, "sha256", counted)
    first = found.index("team")
    revision = found.revision(found.skill("team", "review"))
    assert found.index("team") is first and found.revision(found.skill("team", "review")) == revision
    assert len(hashed) == 1

    (skill / "SKILL.md").write_text("---\nname: review\ndescription: Changed.\n---\nmore text\n", encoding="utf-8")
    os.utime(skill / "SKILL.md", ns=(1, 1))  # a new mtime, however coarse the file system's clock
    changed = found.revision(found.skill("team", "review"))
    assert changed != revision and len(hashed) == 2
    assert found.skill("team", "review").description == "Changed."

    make_skill(tmp_path / "team", "later", "later")  # a new directory: the root is indexed again
    assert "later" in found.index("team").skills


def test_a_skill_or_root_that_cannot_be_used(tmp_path: Path) -> None:
    make_skill(tmp_path / "team", "review", "review")
    found = roots(tmp_path)
    with pytest.raises(SkillError, match=r"skill team:nope: not in .*team$"):
        found.skill("team", "nope")
    with pytest.raises(SkillError, match="skill root 'other' is not loaded"):
        found.index("other")
    shutil.rmtree(tmp_path / "team")
    with pytest.raises(SkillError, match="skill root 'team': No such file or directory"):
        found.index("team")


# -- git work trees -------------------------------------------------------------------------------------------------------

CONFIG = """[core]
\tbare = false
[remote "upstream"]
\turl = https://example.org/upstream.git
[Remote "origin"]   ; the section's name is case-insensitive
\tURL = "git@github.com:acme/payments.git"   # a comment
\tfetch = +refs/heads/*:refs/remotes/origin/*
[branch "main"]
\tremote = origin
"""


def test_origin_url_from_a_config_file() -> None:
    assert origin_url(CONFIG) == "git@github.com:acme/payments.git"
    assert origin_url('[remote "upstream"]\n\turl = x\n') is None
    assert origin_url("[remote.origin]\nurl = old-style\n") == "old-style"
    assert origin_url('[remote "origin"] url = same-line\n') == "same-line"


def test_remote_forms() -> None:
    for url in ("git@github.com:acme/x.git", "https://github.com/acme/x.git", "ssh://git@github.com:22/acme/x.git"):
        assert remote_forms(url) == (url, "github.com/acme/x.git")
    assert remote_forms("/srv/x.git") == ("/srv/x.git",)


def test_a_work_tree_and_its_origin_from_a_cwd_below_it(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / ".git" / "config").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "repo" / "src" / "pkg").mkdir(parents=True)
    cache = GitInfoCache()
    expected = GitInfo(str(tmp_path / "repo"), "git@github.com:acme/payments.git")
    assert cache.lookup(str(tmp_path / "repo" / "src" / "pkg")) == expected
    assert cache.lookup(str(tmp_path)) == GitInfo()


def test_a_linked_worktrees_git_file_leads_to_the_common_config(tmp_path: Path) -> None:
    main = tmp_path / "main"
    admin = main / ".git" / "worktrees" / "feature"
    admin.mkdir(parents=True)
    (main / ".git" / "config").write_text(CONFIG, encoding="utf-8")
    (admin / "commondir").write_text("../..\n", encoding="utf-8")
    (admin / "gitdir").write_text(f"{tmp_path / 'feature' / '.git'}\n", encoding="utf-8")
    (tmp_path / "feature" / "sub").mkdir(parents=True)
    (tmp_path / "feature" / ".git").write_text(f"gitdir: {admin}\n", encoding="utf-8")
    info = GitInfoCache().lookup(str(tmp_path / "feature" / "sub"))
    assert info == GitInfo(str(tmp_path / "feature"), "git@github.com:acme/payments.git")


def test_a_relative_gitdir_without_a_commondir_a_submodules(tmp_path: Path) -> None:
    modules = tmp_path / "super" / ".git" / "modules" / "lib"
    modules.mkdir(parents=True)
    (modules / "config").write_text('[remote "origin"]\n\turl = https://example.org/lib.git\n', encoding="utf-8")
    (tmp_path / "super" / "lib").mkdir()
    (tmp_path / "super" / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n", encoding="utf-8")
    info = GitInfoCache().lookup(str(tmp_path / "super" / "lib"))
    assert info == GitInfo(str(tmp_path / "super" / "lib"), "https://example.org/lib.git")


def test_an_unreadable_git_file_still_names_the_work_tree(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / ".git").write_text("not a gitdir line\n", encoding="utf-8")
    assert GitInfoCache().lookup(str(tmp_path / "repo")) == GitInfo(str(tmp_path / "repo"), None)


def test_a_config_is_parsed_once_per_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    config = tmp_path / ".git" / "config"
    config.write_text(CONFIG, encoding="utf-8")
    parsed: list[str] = []
    real = gitinfo.origin_url

    def counted(text: str) -> str | None:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(gitinfo, "origin_url", counted)
    cache = GitInfoCache()
    for _ in range(3):
        assert cache.lookup(str(tmp_path)).remote == "git@github.com:acme/payments.git"
    assert len(parsed) == 1
    config.write_text('[remote "origin"]\n\turl = https://example.org/moved.git\n', encoding="utf-8")
    os.utime(config, ns=(1, 1))
    assert cache.lookup(str(tmp_path)).remote == "https://example.org/moved.git"
    assert len(parsed) == 2


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_worktree_git_made(tmp_path: Path) -> None:
    """The layout `git worktree add` leaves, read without git."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}

    def git(*args: str, cwd: Path) -> None:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    main = tmp_path / "main"
    main.mkdir()
    git("init", "-q", cwd=main)
    git("remote", "add", "origin", "https://example.org/acme/main.git", cwd=main)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x", cwd=main)
    git("worktree", "add", "-q", str(tmp_path / "wt"), cwd=main)
    assert (tmp_path / "wt" / ".git").is_file()
    info = GitInfoCache().lookup(str(tmp_path / "wt"))
    assert info == GitInfo(str(tmp_path / "wt"), "https://example.org/acme/main.git")

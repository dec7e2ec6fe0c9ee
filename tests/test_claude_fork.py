"""The fork's transcript copy (spec §1.7), on transcripts shaped like the CLI's (and the replay harness's seed)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bridges.claude_code import fork

SOURCE = "0e70de90-9b5d-47f6-96b1-1d2711dbcade"
U1, A1, P1, U2 = (f"00000000-0000-4000-8000-00000000000{i}" for i in range(1, 5))


def seed(tmp_path: Path, entries: list[dict[str, Any]]) -> tuple[dict[str, str], Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    project = tmp_path / "config" / "projects" / fork.sanitize(os.path.realpath(workspace))
    project.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(json.dumps(e) for e in entries) + "\n\nnot json\n"
    (project / f"{SOURCE}.jsonl").write_text(lines)
    return env, workspace


def entry(kind: str, uid: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": uid, "parentUuid": parent, "sessionId": SOURCE, **extra}


def read(env: dict[str, str], workspace: Path, session: str) -> list[dict[str, Any]]:
    project = Path(env["CLAUDE_CONFIG_DIR"]) / "projects" / fork.sanitize(os.path.realpath(workspace))
    path = project / f"{session}.jsonl"
    assert path.stat().st_mode & 0o777 == 0o600
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sanitized_project_names() -> None:
    assert fork.sanitize("/tmp/bb-recording-ws") == "-tmp-bb-recording-ws"


def test_fork_rekeys_entries_and_skips_progress(tmp_path: Path) -> None:
    env, workspace = seed(
        tmp_path,
        [
            entry("user", U1, None, message={"role": "user", "content": "Fix the bug\nplease"}, slug="s"),
            entry("progress", P1, U1),
            entry("assistant", A1, P1, message={"role": "assistant", "content": []}),
            entry("user", U2, A1, isSidechain=True),
            {"type": "summary", "summary": "x"},
        ],
    )
    new_id = fork.fork(env, str(workspace), SOURCE)
    user, assistant, title = read(env, workspace, new_id)
    assert user["sessionId"] == new_id and user["uuid"] not in (U1, A1) and user["parentUuid"] is None
    assert "slug" not in user and user["forkedFrom"] == {"sessionId": SOURCE, "messageUuid": U1}
    assert assistant["parentUuid"] == user["uuid"] and "timestamp" in assistant and "timestamp" not in user
    assert title == {"type": "custom-title", "customTitle": "Fix the bug (fork)", "sessionId": new_id}


def test_fork_at_a_checkpoint(tmp_path: Path) -> None:
    env, workspace = seed(tmp_path, [entry("user", U1, None), entry("assistant", A1, U1), entry("user", U2, A1)])
    new_id = fork.fork(env, str(workspace), SOURCE, A1)
    assert [e["forkedFrom"]["messageUuid"] for e in read(env, workspace, new_id)[:-1]] == [U1, A1]


@pytest.mark.parametrize(
    ("source", "checkpoint", "message"),
    [
        ("nope", None, "Invalid sessionId: nope"),
        (SOURCE, "bad", "Invalid upToMessageId: bad"),
        (SOURCE, U2, f"Message {U2} not found in session {SOURCE}"),
        (A1, None, f"Session {A1} not found in project directory for "),
    ],
)
def test_fork_failures(tmp_path: Path, source: str, checkpoint: str | None, message: str) -> None:
    env, workspace = seed(tmp_path, [entry("user", U1, None)])
    with pytest.raises(fork.ForkError, match=message):
        fork.fork(env, str(workspace), source, checkpoint)


def test_fork_of_an_empty_session(tmp_path: Path) -> None:
    env, workspace = seed(tmp_path, [entry("progress", P1, None)])
    with pytest.raises(fork.ForkError, match="has no messages to fork"):
        fork.fork(env, str(workspace), SOURCE)


def test_fork_leaves_out_the_system_prompt_snapshot(tmp_path: Path) -> None:
    """The CLI replays a transcript's `prompt_snapshot` on `--resume`: a fork copies none, so the fork's own
    instructions apply (its children are re-parented like a progress entry's)."""
    snapshot = {"type": "prompt_snapshot", "systemPrompt": ["the source's instructions"]}
    env, workspace = seed(
        tmp_path,
        [
            entry("user", U1, None, message={"role": "user", "content": "Hi"}),
            entry("attachment", P1, U1, attachment=snapshot),
            entry("attachment", U2, P1, attachment={"type": "date", "date": "2026-12-04"}),
            entry("assistant", A1, U2, message={"role": "assistant", "content": []}),
        ],
    )
    new_id = fork.fork(env, str(workspace), SOURCE)
    user, date, assistant, _ = read(env, workspace, new_id)
    assert "the source's instructions" not in json.dumps(read(env, workspace, new_id))
    assert [e["forkedFrom"]["messageUuid"] for e in (user, date, assistant)] == [U1, U2, A1]
    assert date["parentUuid"] == user["uuid"] and assistant["parentUuid"] == date["uuid"]

"""The per-thread journal: contiguous seqs, bounds, durability."""

from __future__ import annotations

import json
from pathlib import Path

from bbridge.daemon.journal import Journal


def events(n: int) -> list[dict[str, object]]:
    return [{"type": "turn/started", "n": i} for i in range(n)]


def test_seqs_are_contiguous_per_thread_and_entries_pre_encoded() -> None:
    journal = Journal()
    first = journal.append("a", events(2))
    journal.append("b", events(1))
    second = journal.append("a", events(1))
    assert [json.loads(e)["seq"] for e in first + second] == [1, 2, 3]
    assert json.loads(second[0])["event"] == {"type": "turn/started", "n": 0}
    assert journal.last_seq("a") == 3 and journal.last_seq("b") == 1 and journal.last_seq("c") == 0
    replay = journal.after("a", 1)
    assert [seq for seq, _ in replay.entries] == [2, 3] and replay.last_seq == 3 and replay.missing_before == 0


def test_the_bound_drops_the_oldest_and_says_what_is_missing() -> None:
    journal = Journal(bound=2)
    journal.append("a", events(5))
    replay = journal.after("a", 0)
    assert [seq for seq, _ in replay.entries] == [4, 5] and replay.missing_before == 3
    assert journal.after("a", 3).missing_before == 0


def test_a_durable_journal_reloads_and_serves_beyond_the_memory_bound(tmp_path: Path) -> None:
    journal = Journal(bound=2, directory=tmp_path)
    journal.append("thr/1", events(4))
    journal.close()
    again = Journal(bound=2, directory=tmp_path)
    assert again.last_seq("thr/1") == 4
    replay = again.after("thr/1", 0)
    assert [seq for seq, _ in replay.entries] == [1, 2, 3, 4] and replay.missing_before == 0
    assert [json.loads(e)["seq"] for e in again.append("thr/1", events(1))] == [5]
    assert (tmp_path / "thr%2F1.ndjson").exists()

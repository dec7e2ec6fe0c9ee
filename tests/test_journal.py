"""The per-thread journal: contiguous seqs, bounds, durability."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from bbridge.daemon import journal as journal_module
from bbridge.daemon.journal import Journal, file_name


def events(n: int) -> list[dict[str, object]]:
    return [{"type": "turn/started", "n": i} for i in range(n)]


def test_seqs_are_contiguous_per_thread_and_entries_pre_encoded() -> None:
    journal = Journal()
    first = journal.log.append("a", events(2))
    journal.log.append("b", events(1))
    second = journal.log.append("a", events(1))
    assert [json.loads(e)["seq"] for e in first + second] == [1, 2, 3]
    assert json.loads(second[0])["event"] == {"type": "turn/started", "n": 0}
    assert journal.last_seq("a") == 3 and journal.last_seq("b") == 1 and journal.last_seq("c") == 0
    replay = journal.after("a", 1)
    assert [seq for seq, _ in replay.entries] == [2, 3] and replay.last_seq == 3 and replay.missing_before == 0


def test_the_bound_drops_the_oldest_and_says_what_is_missing() -> None:
    journal = Journal(bound=2)
    journal.log.append("a", events(5))
    replay = journal.after("a", 0)
    assert [seq for seq, _ in replay.entries] == [4, 5] and replay.missing_before == 3
    assert journal.after("a", 3).missing_before == 0


def test_a_durable_journal_reloads_and_serves_beyond_the_memory_bound(tmp_path: Path) -> None:
    journal = Journal(bound=2, directory=tmp_path)
    journal.log.append("thr/1", events(4))
    journal.close()
    again = Journal(bound=2, directory=tmp_path)
    assert again.last_seq("thr/1") == 4
    replay = again.after("thr/1", 0)
    assert [seq for seq, _ in replay.entries] == [1, 2, 3, 4] and replay.missing_before == 0
    assert [json.loads(e)["seq"] for e in again.log.append("thr/1", events(1))] == [5]
    assert (tmp_path / file_name("thr/1")).exists() and file_name("thr/1").startswith("~")


def seqs(journal: Journal, thread_id: str) -> list[int]:
    return [seq for seq, _ in journal.after(thread_id, 0).entries]


@pytest.mark.parametrize("tail", [b'{"seq":4,"event":{"type":"tu', b'{"seq":4,"ev\xff', b"\x00\x00\x00", b"[" * 5000])
def test_a_torn_tail_is_cut_back_and_the_seq_continues(tmp_path: Path, tail: bytes) -> None:
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(3))
    journal.close()
    path = tmp_path / file_name("t")
    good = path.read_bytes()
    path.write_bytes(good + tail)
    again = Journal(directory=tmp_path)
    assert again.last_seq("t") == 3
    assert path.read_bytes() == good  # the tail is gone from disk too
    assert [json.loads(e)["seq"] for e in again.log.append("t", events(1))] == [4]
    again.close()
    assert seqs(Journal(directory=tmp_path), "t") == [1, 2, 3, 4]
    assert again.health()["truncatedTails"] == 1


def test_a_tail_torn_right_after_an_entry_gets_its_newline_back(tmp_path: Path) -> None:
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(2))
    journal.close()
    path = tmp_path / file_name("t")
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    again = Journal(directory=tmp_path)
    again.log.append("t", events(1))
    again.close()
    assert seqs(Journal(directory=tmp_path), "t") == [1, 2, 3]
    assert again.health()["truncatedTails"] == 0


def test_a_corrupt_entry_inside_the_file_is_skipped_and_never_lowers_the_seq(tmp_path: Path) -> None:
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(4))
    journal.close()
    path = tmp_path / file_name("t")
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    again = Journal(directory=tmp_path)
    assert again.last_seq("t") == 4
    assert [json.loads(e)["seq"] for e in again.log.append("t", events(1))] == [5]
    assert again.health()["corruptEntries"] == 1 and again.health()["truncatedTails"] == 0


@pytest.mark.parametrize("thread_id", ["x" * 304, "é" * 200, "thr/../../etc", ".hidden", "a\x00b", "\ud800"])
def test_any_thread_id_gets_a_safe_short_file(tmp_path: Path, thread_id: str) -> None:
    journal = Journal(directory=tmp_path)
    journal.log.append(thread_id, events(2))
    journal.log.append("plain_id-1.x", events(1))
    journal.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and all(len(name.encode()) < 100 for name in names)
    assert "plain_id-1.x.ndjson" in names
    again = Journal(directory=tmp_path)
    assert seqs(again, thread_id) == [1, 2] and seqs(again, "plain_id-1.x") == [1]


class _FullDisk:
    """A journal file on a full disk: every write fails after a partial one."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.fail = inner, True

    def write(self, data: bytes) -> int:
        if self.fail:
            self.inner.write(data[:7])
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self.inner.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_write_error_is_counted_and_never_stops_delivery(tmp_path: Path) -> None:
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(2))
    file = journal._files["t"]
    disk = file.handle = _FullDisk(file.handle)  # type: ignore[assignment]
    delivered = journal.log.append("t", events(2))
    assert [json.loads(e)["seq"] for e in delivered] == [3, 4]  # still encoded and returned for delivery
    health = journal.health()
    assert health["writeErrors"] == 1 and not health["healthy"] and "No space left" in health["lastError"]
    disk.fail = False  # space again: the next write starts on a fresh line
    journal.log.append("t", events(1))
    journal.close()
    again = Journal(directory=tmp_path)
    assert again.last_seq("t") == 5  # the lost entries leave a gap, never a reused seq
    assert seqs(again, "t") == [1, 2, 5]
    later = again.after("t", 2).entries  # memory holds the run after the gap, each entry under its own seq
    assert [seq for seq, _ in later] == [5] and all(json.loads(raw)["seq"] == seq for seq, raw in later)
    assert again.health()["corruptEntries"] == 1  # the partial line


def test_an_unreadable_directory_keeps_the_journal_in_memory(tmp_path: Path) -> None:
    journal = Journal(directory=tmp_path)
    (tmp_path / file_name("t")).mkdir()  # opening the thread's file fails
    assert [json.loads(e)["seq"] for e in journal.log.append("t", events(2))] == [1, 2]
    assert journal.health()["writeErrors"] == 1


def test_a_thread_let_go_leaves_memory_and_closes_its_file(tmp_path: Path) -> None:
    """Its file has every entry: a replay reads it, its next entry appends to it without reading it back."""
    journal = Journal(bound=2, directory=tmp_path)
    journal.log.append("t", events(3))
    handle = journal._files["t"].handle
    journal.let_go("t")
    assert "t" not in journal.log.threads and "t" not in journal._files and handle.closed
    assert journal.last_seq("t") == 3 and journal.threads() == {"t": 3} and "t" not in journal.log.threads
    replay = journal.after("t", 0)  # beyond the memory bound: the file has them all
    assert [seq for seq, _ in replay.entries] == [1, 2, 3] and replay.missing_before == 0 and replay.last_seq == 3
    assert journal.after("t", 3).entries == [] and "t" not in journal._files  # nothing was opened to answer
    journal.let_go("t")  # twice: nothing more to let go
    with pytest.MonkeyPatch.context() as patch:  # its next entry appends without reading the file back
        patch.setattr(journal_module, "_scan", lambda data: pytest.fail("read back to append"))
        assert [json.loads(e)["seq"] for e in journal.log.append("t", events(1))] == [4]
    journal.close()
    assert seqs(Journal(directory=tmp_path), "t") == [1, 2, 3, 4]


def test_a_thread_let_go_is_synced_first_and_parked_even_when_its_close_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(journal_module.os, "fsync", synced.append)
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(1))
    file = journal._files["t"]
    assert file.handle.fileno() not in synced
    fileno = file.handle.fileno()

    class _CloseFails:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def close(self) -> None:
            self.inner.close()  # as CPython does: the descriptor is closed, then the error is raised
            raise OSError(errno.EIO, "Input/output error")

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    file.handle = _CloseFails(file.handle)  # type: ignore[assignment]
    journal.let_go("t")
    assert synced == [fileno] and "t" not in journal._files  # its entries were synced: the file has them all
    journal.log.append("t", events(1))
    journal.close()
    assert seqs(Journal(directory=tmp_path), "t") == [1, 2]


def test_a_reopened_threads_entries_the_file_missed_are_still_replayed(tmp_path: Path) -> None:
    """Let go, then a write fails: the file has the older, memory the newer; a replay joins them."""
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(3))
    journal.let_go("t")
    journal.log.append("t", events(1))
    disk = journal._files["t"].handle = _FullDisk(journal._files["t"].handle)  # type: ignore[assignment]
    journal.log.append("t", events(1))
    disk.fail = False
    replay = journal.after("t", 0)
    assert [seq for seq, _ in replay.entries] == [1, 2, 3, 4, 5] and replay.last_seq == 5 and replay.missing_before == 0
    assert [seq for seq, _ in journal.after("t", 4).entries] == [5]


def test_a_thread_whose_file_missed_a_write_is_not_let_go(tmp_path: Path) -> None:
    """Memory then has entries the file has not: they stay, and so does the file (torn, to start a fresh line)."""
    journal = Journal(directory=tmp_path)
    journal.log.append("t", events(1))
    file = journal._files["t"]
    disk = file.handle = _FullDisk(file.handle)  # type: ignore[assignment]
    journal.log.append("t", events(1))
    disk.fail = False
    journal.let_go("t")
    assert "t" in journal.log.threads and journal._files["t"] is file
    assert [seq for seq, _ in journal.after("t", 0).entries] == [1, 2]
    journal.let_go("never-heard")  # a thread with no log: nothing to do
    memory = Journal()
    memory.log.append("t", events(1))
    memory.let_go("t")  # without a directory, memory is all there is
    assert [seq for seq, _ in memory.after("t", 0).entries] == [1]

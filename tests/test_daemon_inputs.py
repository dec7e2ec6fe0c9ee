"""The daemon end to end, turn inputs and thread names as thread state (issue 34): an accepted `turn/start` or
`turn/steer` is kept (`thread/inputs`) and told (`thread/input`), a refused one is not; the bounds; the journal
keeps them across a restart; `daemon/status` names each thread from its latest `thread/name/updated` event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bbridge.daemon import inputs, journal
from bbridge.daemon.journal import Journal
from bbridge.wire import rpc
from tests.daemon_turns import START, THREAD, completed, turn
from tests.support import connect, fake_provider, running

HELLO = {"protocolVersion": 1, "client": {"name": "inputs-test", "version": "9.9"}}


def prompt(n: int, text: str) -> dict[str, Any]:
    return {**turn(n), "input": [{"type": "text", "text": text}]}


def told(client: Any) -> list[dict[str, Any]]:
    return [params for method, params in client.notes if method == "thread/input"]


async def test_an_accepted_turn_is_kept_and_told_to_every_client(tmp_path: Path) -> None:
    async with (
        running(tmp_path, {"fake": fake_provider()}) as (_, path),
        connect(path) as sender,
        connect(path) as watcher,
    ):
        await sender.request("initialize", HELLO)
        await sender.request("thread/start", START)
        await sender.request("turn/start", prompt(1, "Fix the build"))
        await sender.wait_for(lambda: completed(sender))
        await watcher.wait_for(lambda: bool(told(watcher)))
        kept = (await watcher.request("thread/inputs", {"threadId": THREAD}))["inputs"]
        assert len(kept) == 1
        record = kept[0]
        accepted = sender.of(THREAD, "turn/input/accepted")[0]
        assert record["clientRequestId"] == accepted["clientRequestId"] == turn(1)["clientRequestId"]
        assert record["method"] == "turn/start"
        assert record["input"] == [{"type": "text", "text": "Fix the build"}]
        assert record["client"]["name"] == "inputs-test" and record["client"]["version"] == "9.9"
        assert record["client"]["connection"] and "truncated" not in record
        assert told(watcher) == [{"threadId": THREAD, "providerId": "fake", **record}]
        later = await watcher.request("thread/inputs", {"threadId": THREAD, "afterSentAt": record["sentAt"]})
        assert later == {"inputs": []}
        assert (await watcher.request("thread/inputs", {"threadId": "thr_unknown"})) == {"inputs": []}
        with pytest.raises(rpc.RpcError) as refused:
            await watcher.request("thread/inputs", {})
        assert refused.value.code == rpc.INVALID_PARAMS


async def test_an_accepted_steer_is_kept_and_a_refused_one_is_not(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("silent-turn")}) as (_, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", prompt(1, "start"))
        await client.wait_for(lambda: bool(client.of(THREAD, "turn/started")))
        turn_id = client.of(THREAD, "turn/started")[0]["scope"]["turnId"]
        await client.request("turn/steer", {**prompt(2, "and steer"), "expectedTurnId": turn_id})
        await client.wait_for(lambda: len(told(client)) == 2)
        kept = (await client.request("thread/inputs", {"threadId": THREAD}))["inputs"]
        assert [(r["method"], r["input"][0]["text"]) for r in kept] == [
            ("turn/start", "start"),
            ("turn/steer", "and steer"),
        ]
    async with running(tmp_path, {"fake": fake_provider()}) as (_, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", prompt(1, "done soon"))
        await client.wait_for(lambda: completed(client))
        with pytest.raises(rpc.RpcError, match="no active turn"):
            await client.request("turn/steer", {**prompt(2, "too late"), "expectedTurnId": "turn_gone"})
        kept = (await client.request("thread/inputs", {"threadId": THREAD}))["inputs"]
        assert [r["input"][0]["text"] for r in kept] == ["done soon"]
        assert [r["clientRequestId"] for r in told(client)] == [turn(1)["clientRequestId"]]


async def test_a_turn_the_bridge_never_accepts_keeps_nothing(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("exit-on-turn")}) as (_, path), connect(path) as client:
        await client.request("thread/start", START)
        with pytest.raises(rpc.RpcError):
            await client.request("turn/start", prompt(1, "never accepted"))
        assert (await client.request("thread/inputs", {"threadId": THREAD})) == {"inputs": []}
        assert told(client) == []


async def test_inputs_are_journaled_and_read_back_after_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (_, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", prompt(1, "remember me"))
        await client.wait_for(lambda: completed(client))
        before = (await client.request("thread/inputs", {"threadId": THREAD}))["inputs"]
    assert (folder / f"{THREAD}.inputs.ndjson").exists()
    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (daemon, path),
        connect(path) as client,
    ):
        assert [row["threadId"] for row in daemon.status()["threads"]] == [THREAD]  # the file is no thread's
        assert (await client.request("thread/inputs", {"threadId": THREAD}))["inputs"] == before
        await client.request("thread/resume", START)
        await client.request("turn/start", prompt(2, "and me"))
        await client.wait_for(lambda: len(told(client)) == 1)
        kept = (await client.request("thread/inputs", {"threadId": THREAD}))["inputs"]
        assert [r["input"][0]["text"] for r in kept] == ["remember me", "and me"]


async def test_an_oversized_prompt_is_kept_cut_and_flagged(tmp_path: Path) -> None:
    text = "é" * inputs.MAX_INPUT_BYTES  # two bytes each: twice the bound
    async with running(tmp_path, {"fake": fake_provider()}) as (_, path), connect(path) as client:
        await client.request("thread/start", START)
        await client.request("turn/start", prompt(1, text))
        await client.wait_for(lambda: completed(client))
        (record,) = (await client.request("thread/inputs", {"threadId": THREAD}))["inputs"]
        assert record["truncated"] is True
        assert record["input"][0] == {"type": "text", "text": "é" * (inputs.MAX_INPUT_BYTES // 2)}


def test_the_bound_cuts_at_a_character_and_counts_every_element() -> None:
    elements = [{"type": "text", "text": "abc"}, {"type": "text", "text": "dé"}, {"type": "localImage", "path": "x"}]
    assert inputs.bounded(elements, 4) == ([{"type": "text", "text": "abc"}, {"type": "text", "text": "d"},
                                            {"type": "localImage", "path": ""}], True)  # fmt: skip
    assert inputs.bounded(elements, 100) == (elements, False)
    mentioned = [{"type": "text", "text": "ab", "mentions": [{"path": "x" * 50}]}]
    assert inputs.bounded(mentioned, 20) == ([{"type": "text", "text": "ab"}], True)
    assert inputs.bounded(mentioned, 100) == (mentioned, False)


def test_each_thread_keeps_its_newest_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "INPUTS_BOUND", 3)
    sent: list[list[bytes]] = []
    kept = inputs.Inputs(sent.append)
    client = {"connection": "socket-1"}
    for n in range(5):
        kept.add("thr_a", "fake", [], f"creq_{n}", "turn/start", float(n), client)
    assert [r["clientRequestId"] for r in kept.listing("thr_a", None)["inputs"]] == ["creq_2", "creq_3", "creq_4"]
    assert [r["sentAt"] for r in kept.listing("thr_a", 2.0)["inputs"]] == [3.0, 4.0]
    assert len(sent) == 5


def test_a_released_threads_file_is_read_back_and_cut_to_the_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(inputs, "INPUTS_BOUND", 3)
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    client = {"connection": "socket-1"}
    for n in range(5):
        kept.add("thr_a", "fake", [], f"creq_{n}", "turn/start", float(n), client)
    path = journal.beside(tmp_path, "thr_a", inputs.KIND)
    assert len(path.read_text().splitlines()) == 5  # appended as they come
    kept.let_go("thr_a")
    assert "thr_a" not in kept.held
    for n in (5, 6):  # a file longer than the process knows (another daemon's, before a restart)
        journal.append_record(path, {"clientRequestId": f"creq_{n}", "method": "turn/start", "input": [],
                                     "sentAt": float(n), "client": client})  # fmt: skip
    assert [r["clientRequestId"] for r in kept.listing("thr_a", None)["inputs"]] == ["creq_4", "creq_5", "creq_6"]
    assert [json.loads(line)["clientRequestId"] for line in path.read_text().splitlines()] == [
        "creq_4", "creq_5", "creq_6"
    ]  # past twice the bound: cut to it  # fmt: skip


def test_a_thread_never_released_has_its_file_cut_as_it_grows(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(inputs, "INPUTS_BOUND", 3)
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    path = journal.beside(tmp_path, "thr_a", inputs.KIND)
    sizes = []
    for n in range(12):
        kept.add("thr_a", "fake", [], f"creq_{n}", "turn/start", float(n), {"connection": "socket-1"})
        sizes.append(len(path.read_text().splitlines()))
    assert sizes == [1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4]  # never past twice the bound: cut to the newest three
    assert [json.loads(line)["clientRequestId"] for line in path.read_text().splitlines()] == [
        "creq_8", "creq_9", "creq_10", "creq_11"
    ]  # fmt: skip


def test_a_released_thread_holds_only_the_inputs_added_since(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its next turn does not read its file back: memory holds what came since, the file has them all."""
    monkeypatch.setattr(inputs, "INPUTS_BOUND", 3)
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    path = journal.beside(tmp_path, "thr_a", inputs.KIND)
    kept.add("thr_a", "fake", [], "creq_0", "turn/start", 0.0, {"connection": "socket-1"})
    kept.add("thr_a", "fake", [], "creq_1", "turn/steer", 1.0, {"connection": "socket-2"})
    kept.let_go("thr_a")
    reads: list[int] = []  # the inputs held when the file was read
    monkeypatch.setattr(inputs, "read_records", lambda *args, **kwargs: reads.append(len(kept.held.get("thr_a", ()))) or
                        journal.read_records(*args, **kwargs))  # fmt: skip
    for n in range(2, 7):
        kept.add("thr_a", "fake", [], f"creq_{n}", "turn/start", float(n), {"connection": f"socket-{n}"})
        assert [r["clientRequestId"] for r in kept.held["thr_a"]] == [f"creq_{m}" for m in range(2, n + 1)][-3:]
        assert kept.client_of("thr_a", f"creq_{n}") == {"connection": f"socket-{n}"}
    assert reads == [3]  # once, to cut the file past twice the bound (at the seventh input) to the newest three
    assert len(path.read_text().splitlines()) == 3
    kept.let_go("thr_a")
    assert kept.client_of("thr_a", "creq_4") == {"connection": "socket-4"}  # from the file, held by nobody
    assert kept.client_of("thr_a", None) == {"connection": "socket-6"} and "thr_a" not in kept.held
    assert [r["clientRequestId"] for r in kept.listing("thr_a", 3.0)["inputs"]] == ["creq_4", "creq_5", "creq_6"]


def test_a_restarted_daemon_counts_a_files_lines_before_its_first_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(inputs, "INPUTS_BOUND", 2)
    path = journal.beside(tmp_path, "thr_a", inputs.KIND)
    for n in range(4):  # another daemon's: twice the bound already
        journal.append_record(path, {"clientRequestId": f"creq_{n}", "method": "turn/start", "input": [],
                                     "sentAt": float(n), "client": {}})  # fmt: skip
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    kept.add("thr_a", "fake", [], "creq_4", "turn/start", 4.0, {})
    assert [json.loads(line)["clientRequestId"] for line in path.read_text().splitlines()] == ["creq_3", "creq_4"]


def test_a_thread_whose_file_missed_an_input_keeps_its_inputs_when_released(tmp_path: Path) -> None:
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    journal.beside(tmp_path, "thr_a", inputs.KIND).mkdir()  # a directory where the file goes: every append fails
    kept.add("thr_a", "fake", [], "creq_0", "turn/start", 0.0, {"connection": "socket-1"})
    kept.let_go("thr_a")
    assert [r["clientRequestId"] for r in kept.listing("thr_a", None)["inputs"]] == ["creq_0"]


def test_a_file_that_misses_an_input_leaves_all_of_them_in_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the file had and the input it missed: `thread/inputs` lists them all until a restart."""
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    for n in range(2):
        kept.add("thr_a", "fake", [], f"creq_{n}", "turn/start", float(n), {})
    kept.let_go("thr_a")

    def full(path: Path, record: dict[str, Any]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(inputs, "append_record", full)
    kept.add("thr_a", "fake", [], "creq_2", "turn/start", 2.0, {})
    kept.let_go("thr_a")
    assert [r["clientRequestId"] for r in kept.listing("thr_a", None)["inputs"]] == ["creq_0", "creq_1", "creq_2"]


async def test_status_names_each_thread_from_its_latest_name_event(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("pair")}) as (daemon, path), connect(path) as client:
        before = {row["threadId"]: row for row in daemon.status()["threads"]}
        assert before == {}
        await client.request("thread/start", START)
        await client.wait_for(lambda: bool(client.entries[THREAD]))  # its row: once its first event is journaled
        assert {row["threadId"]: row["name"] for row in daemon.status()["threads"]} == {THREAD: None}
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client) and bool(client.entries["thr_other"]))
        names = {row["threadId"]: row["name"] for row in daemon.status()["threads"]}
        assert names == {THREAD: f"named {len(THREAD)}", "thr_other": "named 9"}


async def test_a_journaled_threads_name_is_read_back_after_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    async with (
        running(tmp_path, {"fake": fake_provider("pair")}, journal=Journal(directory=folder)) as (_, path),
        connect(path) as client,
    ):
        await client.request("thread/start", START)
        await client.request("turn/start", turn())
        await client.wait_for(lambda: completed(client) and bool(client.entries["thr_other"]))
    async with running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (daemon, _):
        names = {row["threadId"]: row["name"] for row in daemon.status()["threads"]}
        assert names == {THREAD: f"named {len(THREAD)}", "thr_other": "named 9"}
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, _):
        assert daemon.status()["threads"] == []  # without the journal, nothing is read back


def test_an_input_holding_a_unicode_line_separator_is_listed_whole(tmp_path: Path) -> None:
    """Its file splits lines at `\\n` only: U+2028, U+2029 and U+0085 stay inside a record."""
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    odd = "a\u2028b\u2029c\x85d"
    kept.add("thr_a", "fake", [{"type": "text", "text": odd}], "creq_0", "turn/start", 0.0, {"connection": "s-1"})
    kept.add("thr_a", "fake", [], "creq_1", "turn/start", 1.0, {"connection": "s-2"})
    kept.let_go("thr_a")
    assert [r["input"] for r in kept.listing("thr_a", None)["inputs"]] == [[{"type": "text", "text": odd}], []]
    assert kept.client_of("thr_a", "creq_0") == {"connection": "s-1"}


def test_an_unwritable_and_unreadable_file_keeps_what_memory_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kept = inputs.Inputs(lambda lines: None, tmp_path)
    kept.add("thr_a", "fake", [], "creq_0", "turn/start", 0.0, {})

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(inputs, "append_record", broken)
    monkeypatch.setattr(journal.Path, "read_bytes", broken)
    kept.add("thr_a", "fake", [], "creq_1", "turn/start", 1.0, {})
    kept.let_go("thr_a")
    assert [r["clientRequestId"] for r in kept.listing("thr_a", None)["inputs"]] == ["creq_0", "creq_1"]

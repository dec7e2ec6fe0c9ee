"""The link that drops (issue 33): 200 threads stream to clients whose WebSocket links a proxy cuts 50 times at
random moments; the clients reconnect and resume with `afterSeq`, and every event of every thread arrives exactly
once, in order. An approval pending when the link dropped is still pending after the reconnect and is answered
from the new connection."""

from __future__ import annotations

import random
from typing import Any

import anyio
import trio

from bbridge.client import Client, DaemonError, client_request_id
from bbridge.daemon.config import echo_provider
from bbridge.wire.client_api import Entry
from tests.flaky_link import FlakyLink, flaky_link
from tests.listen_support import TOKEN, listening
from tests.support import FULL

THREADS = 200
WATCHERS = 4
CUTS = 50
APPROVAL = "thr_approval"
WORDS = " ".join(f"w{n}" for n in range(24))


def start(thread_id: str) -> dict[str, Any]:
    return {"providerId": "echo", "threadId": thread_id, "cwd": "/tmp", "options": FULL}


def turn(thread_id: str, text: str) -> dict[str, Any]:
    return {"providerId": "echo", "threadId": thread_id, "clientRequestId": client_request_id(), "options": FULL,
            "input": [{"type": "text", "text": text, "mentions": []}]}  # fmt: skip


class Control:
    """The uncut side: starts every thread and turn on a direct connection and sees each turn complete."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.seen: dict[str, list[Entry]] = {}
        self.completed: dict[str, int] = {}
        self.changed = trio.Event()

    async def follow(self, threads: list[str]) -> None:
        async for thread_id, entry in self.client.timelines(dict.fromkeys(threads, 0)):
            self.seen.setdefault(thread_id, []).append(entry)
            if entry.event["type"] == "turn/completed":
                self.completed[thread_id] = self.completed.get(thread_id, 0) + 1
            self.changed.set()
            self.changed = trio.Event()

    async def run_turns(self, thread_id: str, cutting: trio.Event) -> None:
        """Turns one after another until the cuts are over (at least two)."""
        await self.client.request("thread/start", start(thread_id))
        done = 0
        while done < 2 or not cutting.is_set():
            await self.client.request("turn/start", turn(thread_id, f"slow:{random.randint(5, 20)} {WORDS}"))
            done += 1
            while self.completed.get(thread_id, 0) < done:
                await self.changed.wait()


class Watcher:
    """A client behind the flaky link following its share of the threads with one resuming iterator."""

    def __init__(self, client: Client, threads: list[str]) -> None:
        self.client = client
        self.threads = threads
        self.seqs: dict[str, list[int]] = {thread: [] for thread in threads}
        self.events: dict[str, list[dict[str, Any]]] = {thread: [] for thread in threads}

    async def follow(self) -> None:
        async for thread_id, entry in self.client.timelines(dict.fromkeys(self.threads, 0)):
            self.seqs[thread_id].append(entry.seq)
            self.events[thread_id].append(entry.event)


async def cut_repeatedly(link: FlakyLink, rng: random.Random, cutting: trio.Event) -> None:
    for _ in range(CUTS):
        await link.wait_for_links(WATCHERS)  # a cut while they reconnect would drop nothing
        await trio.sleep(rng.uniform(0.02, 0.12))
        link.cut()
    cutting.set()


async def answer_after_a_cut(watcher: Client, link: FlakyLink, control: Control) -> str:
    """Open an approval, cut the link while it waits, answer it from the watcher's next connection."""
    await control.client.request("thread/start", start(APPROVAL))
    await control.client.request("turn/start", turn(APPROVAL, "approve:command after the cut"))
    with trio.fail_after(20):
        while not (await control.client.pending(APPROVAL)).pending:
            await trio.sleep(0.02)
    await link.wait_for_links(WATCHERS)
    link.cut()
    with trio.fail_after(20):
        while True:
            try:
                pending = (await watcher.pending(APPROVAL)).pending  # on the reconnected link
                (request,) = pending
                await watcher.respond(request.requestId, {"decision": "allow_once", "grantedPermissions": None})
                return request.requestId
            except (DaemonError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                # the link dropped again before the answer: ask again on the next connection
                await trio.sleep(0.05)


async def test_every_event_once_in_order_through_fifty_cuts() -> None:
    rng = random.Random(33)
    random.seed(33)
    threads = [f"thr_{n:03d}" for n in range(THREADS)]
    async with listening({"echo": echo_provider()}) as face, flaky_link(face.port) as link:
        direct, flaky = f"ws://127.0.0.1:{face.port}/rpc", f"ws://127.0.0.1:{link.port}/rpc"
        async with Client.connect(direct, token=TOKEN) as control_client, anyio.create_task_group() as group:
            control = Control(control_client)
            group.start_soon(control.follow, [*threads, APPROVAL])
            watchers = []
            for n in range(WATCHERS):
                client = await group.start(_connected, flaky)
                watchers.append(Watcher(client, threads[n::WATCHERS] + ([APPROVAL] if n == 0 else [])))
                group.start_soon(watchers[-1].follow)
            cutting = trio.Event()
            with trio.fail_after(120):
                async with trio.open_nursery() as turns:
                    for thread_id in threads:
                        turns.start_soon(control.run_turns, thread_id, cutting)
                    turns.start_soon(cut_repeatedly, link, rng, cutting)
                answered = await answer_after_a_cut(watchers[0].client, link, control)
                while control.completed.get(APPROVAL, 0) < 1:
                    await control.changed.wait()
                resolved = (await control.client.pending(APPROVAL)).resolved
                assert isinstance(resolved, list) and len(resolved) == 1, resolved
                resolution = resolved[0]
                last = face.daemon.journal.threads()
                for watcher in watchers:
                    for thread_id in watcher.threads:
                        while len(watcher.seqs[thread_id]) < last[thread_id]:
                            await trio.sleep(0.02)
            group.cancel_scope.cancel()
    assert link.dropped == [WATCHERS] * (CUTS + 1), link.dropped  # every cut dropped every watcher's link
    for watcher in watchers:
        for thread_id in watcher.threads:
            assert watcher.seqs[thread_id] == list(range(1, last[thread_id] + 1)), thread_id
            assert watcher.events[thread_id] == [entry.event for entry in control.seen[thread_id]], thread_id
    assert resolution.requestId == answered and resolution.resolvedBy.startswith("ws-"), resolution


async def _connected(url: str, task_status: anyio.abc.TaskStatus[Client]) -> None:
    async with Client.connect(url, token=TOKEN) as client:
        task_status.started(client)
        await anyio.sleep_forever()

"""Hidden threads in the page (issue 48), against the echo bridge in headless Chromium: never in the threads list,
whether known when the page loads (`daemon/status {includeHidden}`) or announced after (`thread/hidden`) and then
streaming events; any thread, a hidden one too, opens by its id from the URL (`#thread=ID`)."""

from __future__ import annotations

from pathlib import Path

import trio

from bbridge.client import Client
from tests.browser.support import ECHO, ECHO_OPTIONS, Page, settled, start_echo_thread, start_turn
from tests.listen_support import TOKEN, listening

PROVIDERS = {"echo": ECHO}


async def start_hidden(client: Client, thread_id: str, cwd: Path, role: str) -> None:
    hidden = {"runId": "prun_page", "role": role}
    start = {"providerId": "echo", "threadId": thread_id, "cwd": str(cwd), "options": ECHO_OPTIONS, "hidden": hidden}
    await client.request("thread/start", start)


async def rows(page: Page) -> list[str]:
    found = await page.js(
        "return [...document.querySelectorAll('#threads [data-thread-id]')].map(e => e.dataset.threadId)"
    )
    return [str(thread_id) for thread_id in found]


async def test_hidden_threads_are_never_listed_and_open_by_their_id(page: Page, tmp_path: Path) -> None:
    async with listening(PROVIDERS) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_hidden(client, "thr_before", tmp_path, "planner")
        await start_turn(client, "thr_before", "planned words")
        await start_echo_thread(client, "thr_seen", tmp_path)
        await start_turn(client, "thr_seen", "seen words")
        await settled(client, "thr_before")
        await page.open(face.port)
        await page.find('#threads [data-thread-id="thr_seen"]')
        await start_hidden(client, "thr_after", tmp_path, "worker")  # announced by thread/hidden, then streams
        await start_turn(client, "thr_after", "worker words")
        await settled(client, "thr_after")
        await start_turn(client, "thr_seen", "later words")
        await settled(client, "thr_seen", 2)
        await page.open_thread("thr_seen")
        await page.find("#timeline .assistant-text", "later words")
        await trio.sleep(2.5)  # a poll of daemon/status (every 2 s) lists nothing more either
        assert await rows(page) == ["thr_seen"]

        await page.js("location.hash = '#thread=thr_after'")  # a hidden thread, opened by its id
        await page.find("#timeline .assistant-text", "worker words")
        assert "thr_after" in await page.text(await page.find("#thread-title"))
        assert await page.js("return location.hash") == "#thread=thr_after"
        assert await rows(page) == ["thr_seen"]

        await page.call(page.driver.get, "about:blank")  # a fresh load of a URL naming a thread and the token
        await page.call(page.driver.get, f"http://127.0.0.1:{face.port}/#token={TOKEN}&thread=thr_before")
        await page.find("#timeline .assistant-text", "planned words")
        await page.find('#threads [data-thread-id="thr_seen"]')
        assert await rows(page) == ["thr_seen"]

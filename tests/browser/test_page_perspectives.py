"""A Perspectives run in the page (issue 48), in headless Chromium: the room served beside the daemon, a calling
thread on the fake bridge's `tool` mode, the panel on its `panel` mode (tests/test_perspectives_runs.py's harness,
behind a listener). The run shows under its calling thread while it runs and once delivered; each member is a link
that opens its hidden thread's timeline; a daemon without the room shows no runs."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from bbridge.client import Client
from bbridge.perspectives.room import Perspectives
from bbridge.perspectives.settings import load_perspectives
from bbridge.serving import room_face
from bbridge.toolhost.host import load_host
from tests.browser.support import Page, settled, start_echo_thread, start_turn
from tests.browser.test_page import PROVIDERS as ECHO_ONLY
from tests.browser.test_page_hidden import rows
from tests.listen_support import TOKEN, listening
from tests.support import fake_provider

CALLER = "thr_caller"
FULL = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}
# the `stall` worker holds its turn: wrapped up at 1 s, taken as partial when the panel phase ends (5 - 2 = 3 s)
TABLE = """[perspectives]
planner = { provider = "panel" }
worker = { provider = "panel" }
planner_s = 2
wrapup_s = 1
hard_cap_s = 5
synthesis_s = 2
spawn_timeout_s = 3
"""


def room_of(tmp_path: Path) -> Perspectives:
    config = tmp_path / "bbridge.toml"
    config.write_text(TABLE, encoding="utf-8")
    settings, refused = load_perspectives(config)
    assert settings is not None and not refused, refused
    return Perspectives(settings)


async def say(client: Client, text: str) -> None:
    """A turn of the calling thread (a JSON `{"tool", "arguments"}` text calls that tool)."""
    turn = {"threadId": CALLER, "input": [{"type": "text", "text": text, "mentions": []}], "options": FULL}
    await client.request("turn/start", turn)


async def link_texts(page: Page) -> list[str]:
    found = await page.js("return [...document.querySelectorAll('#runs .run-member a')].map(e => e.textContent)")
    return [str(text) for text in found]


async def test_a_run_shows_under_its_calling_thread_and_a_member_opens_its_timeline(page: Page, tmp_path: Path) -> None:
    """The caller's page open before its agent calls `gather_perspectives`: the run appears while it runs (the
    status poll), its phase and its members' states change, then it reads delivered with every member. A click on
    the `alpha` worker opens that hidden thread's timeline (its finding), the address naming it; the thread list
    never shows it; Back returns to the calling thread."""
    room = room_of(tmp_path)
    host = load_host(None, None, None, external=room.tools)
    providers = {"caller": fake_provider("tool"), "panel": fake_provider("panel")}
    options = {"tool_host": host, "services": [room], "faces": [room_face(room)]}
    async with listening(providers, **options) as face, Client.connect(face.url, token=TOKEN) as client:
        start = {"providerId": "caller", "threadId": CALLER, "cwd": str(tmp_path), "options": FULL}
        await client.request("thread/start", start)
        await say(client, "hello")  # listed once its journal has an event
        await settled(client, CALLER)
        await page.open(face.port)
        await page.open_thread(CALLER)
        assert await page.js("return document.querySelector('#runs').hidden")  # no run yet

        call = {"tool": "gather_perspectives", "arguments": {"question": "Q?", "lenses": ["alpha", "stall"]}}
        await say(client, json.dumps(call))
        running = await page.find('#runs .run[data-phase="panel"]', "running (panel)")
        assert (await page.text(running)).startswith("prun_")
        await page.find("#runs .run-member a", "worker · lens stall · panel")
        await page.find('#runs .run[data-outcome="delivered"]', "delivered", timeout=15)
        (run,) = room.runs.values()
        await page.find("#runs h3", "Perspectives runs (1)")
        texts = await link_texts(page)
        assert [text.split(" · ")[0] for text in texts] == ["planner", "worker", "worker", "synthesis"]
        assert "worker · lens alpha · panel · completed" in texts[1]
        assert "worker · lens stall · panel · partial" in texts[2]
        hrefs = await page.js("return [...document.querySelectorAll('#runs .run-member a')].map(e => e.hash)")
        assert hrefs == [f"#thread={m.thread_id}" for m in run.members]
        await page.find("#runs .run-lenses", "Lenses: alpha, stall")

        alpha = run.members[1]
        await page.click(await page.find("#runs .run-member a", "lens alpha"))
        await page.find("#timeline .assistant-text", "Finding on alpha")
        assert alpha.thread_id in await page.text(await page.find("#thread-title"))
        assert await page.js("return location.hash") == f"#thread={alpha.thread_id}"
        assert await page.js("return document.querySelector('#runs').hidden")  # a member calls no run itself
        assert await rows(page) == [CALLER]
        assert not await page.js("return document.querySelectorAll('#runs img, #runs script').length")

        await page.call(page.driver.back)  # the calling thread again, its run with it
        await page.find("#runs .run", "delivered")
        assert CALLER in await page.text(await page.find("#thread-title"))


async def test_a_daemon_without_the_room_shows_no_runs(page: Page, tmp_path: Path) -> None:
    """`perspectives/runs` is -32601 there: the section stays hidden and nothing else breaks."""
    async with listening(ECHO_ONLY) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_echo_thread(client, "thr_plain", tmp_path)
        await start_turn(client, "thr_plain", "hello")
        await settled(client, "thr_plain")
        await page.open(face.port)
        await page.open_thread("thr_plain")
        await page.find("#timeline .assistant-text", "hello")
        await trio.sleep(2.5)  # a status poll passes
        assert await page.js("return document.querySelector('#runs').hidden")
        assert await page.js("return document.querySelector('#runs').children.length") == 0

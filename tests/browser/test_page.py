"""The page against the echo bridge in headless Chromium: a thread another client drives, untrusted text, driving
a thread from the page, the token, a dropped link, and screenshots."""

from __future__ import annotations

from pathlib import Path

import trio
from selenium.common.exceptions import NoAlertPresentException

from bbridge.agents.config import load_agents
from bbridge.agents.resolve import Agents
from bbridge.client import Client
from bbridge.daemon.journal import Journal
from tests.browser.support import (
    DESKTOP,
    ECHO,
    ECHO_OPTIONS,
    PHONE,
    Page,
    artifacts,
    settled,
    start_echo_thread,
    start_turn,
    steer,
)
from tests.flaky_link import flaky_link
from tests.listen_support import TOKEN, listening

PROVIDERS = {"echo": ECHO}


async def test_a_thread_another_client_drives_streams_into_the_page(page: Page, tmp_path: Path) -> None:
    """Opened with the token, the page lists a thread a WebSocket client started and whose turn it holds open
    (`hold`); the timeline shows the text so far with no turn end, then the steer's words join that same message
    live, then the turn's end."""
    async with listening(PROVIDERS) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_echo_thread(client, "thr_watched", tmp_path)
        await start_turn(client, "thr_watched", "hold alpha beta")
        await page.open(face.port)
        await page.find("#connection[data-state=connected]")
        await page.find('#threads [data-thread-id="thr_watched"][data-state=running]')
        await page.open_thread("thr_watched")
        await page.find("#timeline .assistant-text", "alpha beta")
        assert not await page.js("return document.querySelectorAll('#timeline .turn-end').length")
        await steer(client, "thr_watched", "finish gamma")
        await page.find("#timeline .assistant-text", "gamma")
        await page.find('#timeline .turn-end[data-status="completed"]')
        journal = await settled(client, "thr_watched")
    text = await page.js("return [...document.querySelectorAll('#timeline .assistant-text')].map(e => e.innerText)")
    assert any("alpha beta" in t and "gamma" in t for t in text), text  # the steer grew the open message in place
    seqs = await page.seqs()
    assert len(seqs) == len(set(seqs)) and max(seqs) <= journal[-1]["seq"]


HOSTILE = (
    "look <img src=x onerror=\"window.bbridgePwned=1;alert('pwned')\"> and [click me](javascript:window.bbridgePwned=2)"
    " and <script>window.bbridgePwned=3</script>"
)


async def test_agent_text_with_markup_renders_as_text_and_runs_nothing(page: Page, tmp_path: Path) -> None:
    """The echo bridge echoes its prompt, so the agent's message carries an `<img onerror>`, a `javascript:` link
    and a `<script>`: each shows as text (in the prompt and in the answer), nothing runs, no element is made."""
    async with listening(PROVIDERS) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_echo_thread(client, "thr_hostile", tmp_path)
        await start_turn(client, "thr_hostile", "hello")  # a thread is listed once its journal has an event
        await settled(client, "thr_hostile")
        await page.open(face.port)
        await page.open_thread("thr_hostile")
        prompt = await page.find("#prompt textarea[name=text]")
        await page.call(prompt.send_keys, HOSTILE)
        await page.click(await page.button("Send", "#prompt"))
        answer = await page.find("#timeline .assistant-text", "onerror")
        shown = await page.text(answer)
        await trio.sleep(0.5)  # an image error or a script would have fired by now
    assert "<img src=x onerror=" in shown and "<script>" in shown and "click me" in shown
    sent = await page.js("return [...document.querySelectorAll('#timeline .prompt')].pop().innerText")
    assert "<img src=x onerror=" in sent and "javascript:" in sent  # the page's own echo of what it sent
    assert await page.js("return document.querySelectorAll('#timeline img, #timeline script').length") == 0
    assert await page.js("return typeof window.bbridgePwned") == "undefined"
    links = await page.js("return [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))")
    assert not [href for href in links if href.strip().lower().startswith("javascript:")], links
    try:
        alert = await page.call(lambda: page.driver.switch_to.alert)
        raise AssertionError(f"an alert opened: {alert.text}")
    except NoAlertPresentException:
        pass


async def test_a_threads_agent_configuration_shows_in_its_details_as_text(page: Page, tmp_path: Path) -> None:
    """`[[agents]]` resolved for the open thread (`agent/configuration`): each contribution applied or not and why,
    the composed instructions (markup in them stays text), the tool selection; variables by name, never value."""
    config = tmp_path / "bbridge.toml"
    config.write_text(
        f"""
[[agents]]
id = "house"
instructions = {{ mode = "append", text = "Rules: {HOSTILE.replace('"', "'")}" }}
tools = {{ exclude = ["deploy"] }}
env = {{ BB_SECRET_ISH = "s3cret-value" }}

[[agents]]
id = "elsewhere"
scope = {{ project = "/nowhere/**" }}
""",
        encoding="utf-8",
    )
    agents = Agents(load_agents(config), state_dir=tmp_path / "state")
    async with listening(PROVIDERS, agents=agents) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_echo_thread(client, "thr_configured", tmp_path)
        await start_turn(client, "thr_configured", "hello")
        await settled(client, "thr_configured")
        await page.open(face.port)
        await page.open_thread("thr_configured")
        await page.find("#agent-config summary", "Agent configuration (1 applied)")
        await page.js("document.querySelector('#agent-config').open = true")
        await page.find("#agent-config .contributions li", "house: applied")
        await page.find("#agent-config .contributions li", "elsewhere: not applied (scope")
        await page.find("#agent-config pre", "Rules: look <img")
        shown = await page.js("return document.querySelector('#agent-config').innerText")
        assert "exclude: deploy" in shown and "BB_SECRET_ISH" in shown and "s3cret-value" not in shown
        assert not await page.js("return document.querySelectorAll('#agent-config img, #agent-config script').length")
        assert await page.js("return window.bbridgePwned === undefined")


async def test_start_a_thread_send_a_prompt_and_stop_the_turn_from_the_page(page: Page, tmp_path: Path) -> None:
    """The page's own forms: "Start thread" on the echo provider in a directory, "Send" a slow prompt, "Stop" it
    while it streams; the daemon's journal agrees: one turn, interrupted."""
    words = " ".join(f"w{n}" for n in range(60))
    async with listening(PROVIDERS) as face, Client.connect(face.url, token=TOKEN) as client:
        await page.open(face.port)
        form = "#start-thread"
        await page.find(f"{form} select[name=provider] option[value=echo]")
        cwd = await page.find(f"{form} input[name=cwd]")
        await page.call(cwd.send_keys, str(tmp_path))
        await page.click(await page.button("Start thread", form))
        row = await page.find("#threads [data-thread-id]")
        thread_id = await page.call(row.get_attribute, "data-thread-id")
        await page.click(row)
        text = await page.find("#prompt textarea[name=text]:enabled")
        await page.call(text.send_keys, f"slow:200 {words}")
        await page.click(await page.button("Send", "#prompt"))
        await page.find("#timeline .assistant-text", "w1")
        await page.click(await page.button("Stop", "#prompt"))
        await page.find('#timeline .turn-end[data-status="interrupted"]')
        journal = await settled(client, thread_id)
    ends = [e["event"]["status"] for e in journal if e["event"]["type"] == "turn/completed"]
    assert ends == ["interrupted"]
    answer = await page.js("return document.querySelector('#timeline .assistant-text').innerText")
    assert "w1" in answer and "w59" not in answer  # stopped mid-answer


async def test_without_the_token_or_with_a_wrong_one_the_page_shows_one_line_and_no_data(
    page: Page, tmp_path: Path
) -> None:
    async with listening(PROVIDERS) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_echo_thread(client, "thr_secret", tmp_path)
        await start_turn(client, "thr_secret", "the secret words")
        await settled(client, "thr_secret")
        for token in (None, "not-the-token"):
            await page.open(face.port, token)
            line = await page.find("#token-missing")
            text = await page.text(line)
            assert "#token=" in text and "\n" not in text.strip(), text
            await trio.sleep(0.5)  # what a refused page would fetch, it would have by now
            body = await page.js("return document.body.innerText")
            assert "thr_secret" not in body and "secret words" not in body
            assert await page.js("return document.querySelectorAll('[data-thread-id], [data-seq]').length") == 0
            await page.js("sessionStorage.clear()")


async def test_a_dropped_link_reconnects_and_shows_each_event_once(page: Page, tmp_path: Path) -> None:
    """The page reaches the listener through a proxy whose links drop: after a cut the page says it reconnects,
    and once it has, the turns run meanwhile appear, no event twice."""
    async with (
        listening(PROVIDERS) as face,
        flaky_link(face.port) as link,
        Client.connect(face.url, token=TOKEN) as client,
    ):
        await start_echo_thread(client, "thr_cut", tmp_path)
        await start_turn(client, "thr_cut", "before the cut")
        await settled(client, "thr_cut")
        await page.open(link.port)
        await page.open_thread("thr_cut")
        await page.find("#timeline .assistant-text", "before the cut")
        await page.js(
            "window.__states = [];"
            "new MutationObserver(() => window.__states.push(document.querySelector('#connection').dataset.state))"
            ".observe(document.querySelector('#connection'), {attributes: true, attributeFilter: ['data-state']})"
        )
        assert link.cut() >= 1
        await start_turn(client, "thr_cut", "while it was away")
        await settled(client, "thr_cut", 2)
        await page.until(lambda d: "reconnecting" in d.execute_script("return window.__states"), "reconnecting…")
        await page.find("#connection[data-state=connected]", timeout=15)
        await page.find("#timeline .assistant-text", "while it was away", timeout=15)
        await start_turn(client, "thr_cut", "after it came back")
        journal = await settled(client, "thr_cut", 3)
        await page.find("#timeline .assistant-text", "after it came back")
        await page.until(
            lambda d: d.execute_script("return document.querySelectorAll('#timeline .turn-end').length") >= 3,
            "three turn ends",
        )
        await trio.sleep(0.3)  # anything doubled would have been rendered by now
    seqs = await page.seqs()
    assert len(seqs) == len(set(seqs)), f"an event shown twice: {sorted(seqs)}"
    count = page.js
    turns = sum(e["event"]["type"] == "turn/completed" for e in journal)
    assert await count("return document.querySelectorAll('#timeline .turn-end').length") == turns == 3
    assert await count("return document.querySelectorAll('#timeline .turn-start').length") == 3
    texts = await count("return [...document.querySelectorAll('#timeline .assistant-text')].map(e => e.innerText)")
    for words in ("before the cut", "while it was away", "after it came back"):
        assert sum(words in t for t in texts) == 1, texts


async def test_a_daemon_restart_on_its_journal_resumes_the_open_timeline(page: Page, tmp_path: Path) -> None:
    """The daemon stops under the open page and starts again on the same port and journal directory: the page
    says it reconnects, and shows the turn run after the restart once, the earlier ones not again."""
    journal = tmp_path / "journal"
    async with listening(PROVIDERS, journal=Journal(directory=journal)) as face:
        port = face.port
        async with Client.connect(face.url, token=TOKEN) as client:
            await start_echo_thread(client, "thr_kept", tmp_path)
            await start_turn(client, "thr_kept", "before the restart")
            await settled(client, "thr_kept")
            ptid = (await client.status()).threads[0]["providerThreadId"]
        await page.open(port)
        await page.open_thread("thr_kept")
        await page.find("#timeline .assistant-text", "before the restart")
    await page.find("#connection:not([data-state=connected])")
    async with (
        listening(PROVIDERS, port=port, journal=Journal(directory=journal)) as face,
        Client.connect(face.url, token=TOKEN) as client,
    ):
        start = {"providerId": "echo", "threadId": "thr_kept", "cwd": str(tmp_path), "options": ECHO_OPTIONS}
        await client.request("thread/resume", {**start, "providerThreadId": ptid})
        await start_turn(client, "thr_kept", "after the restart")
        entries = await settled(client, "thr_kept", 2)
        await page.find("#connection[data-state=connected]", timeout=20)
        await page.find("#timeline .assistant-text", "after the restart", timeout=15)
        await trio.sleep(0.3)  # anything doubled would have been rendered by now
    seqs = await page.seqs()
    assert len(seqs) == len(set(seqs)), f"an event shown twice: {sorted(seqs)}"
    assert max(seqs) <= entries[-1]["seq"]
    texts = await page.js("return [...document.querySelectorAll('#timeline .assistant-text')].map(e => e.innerText)")
    assert [sum(words in t for t in texts) for words in ("before the restart", "after the restart")] == [1, 1]
    assert await page.js("return document.querySelectorAll('#timeline .turn-end').length") == 2


async def test_screenshots_at_desktop_and_phone_sizes(page: Page, tmp_path: Path) -> None:
    """A thread with every kind of item (`deltas:all`), then an approval waiting, beside another thread: the page
    at 1280×800 and 390×844 (light), and the desktop in dark, saved in the run's artefacts directory."""
    async with listening(PROVIDERS) as face, Client.connect(face.url, token=TOKEN) as client:
        project = Path("/home/you/project")  # what the approval card names (the echo bridge never enters it)
        await start_echo_thread(client, "thr_other", project)
        await start_turn(client, "thr_other", "Say *hello*")
        await start_echo_thread(client, "thr_tour", project)
        await start_turn(client, "thr_tour", "deltas:all")
        await settled(client, "thr_tour")
        await start_turn(client, "thr_tour", "approve:command")
        await page.open(face.port)
        await page.find('#threads [data-thread-id="thr_tour"][data-waiting="true"]')
        await page.open_thread("thr_tour")
        await page.button("Allow once", "#pending")
        shots = [
            await page.screenshot("page-desktop", *DESKTOP),
            await page.screenshot("page-desktop-dark", *DESKTOP, dark=True),
            await page.screenshot("page-phone", *PHONE, phone=True, top="#thread-title"),
        ]
    for shot in shots:
        assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and shot.stat().st_size > 10_000, shot
    assert shots[0].parent == artifacts()

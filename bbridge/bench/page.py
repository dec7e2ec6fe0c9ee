"""The page's figure: how long Chromium takes to render a 10,000-event journal into the timeline.

A daemon in this process (text coalescing off, so every streamed word is its own event) serves the page on a
loopback listener; an echo thread is filled until its journal holds `events` events, by turns of Markdown
(streamed word by word) between turns of every item kind (`deltas:all`: commands, file changes, plans, tool
calls, web searches, reasoning, warnings, errors, usage). Each run loads the page with the token, waits for the
thread's row, then a script in the page clicks it and times, with `performance.now()`, until every turn's end is
in the timeline and the next frame is drawn (a MutationObserver: WebDriver's polling adds nothing). Beside it:
the first event's arrival, and the longest task the main thread ran meanwhile (`longtask` entries: what "stays
responsive" means). Reported, never asserted; where Chromium or selenium is missing the figure says why it was
skipped.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import trio

from bbridge.bench import chromium
from bbridge.client import Client
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.journal import Journal
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.server import serve
from bbridge.listen.admission import Address
from bbridge.listen.face import Bound, ListenSettings, listen_face

THREAD = "thr_bench_page"
PARAGRAPH = (
    "## Step {n}\n\nThe agent **reads** the file `src/main.py`, then *edits* it: see [the docs](https://example.com)."
    "\n\n- one item\n- another item with `code`\n\n```\nprint({n})\n```\n\n"
)
OPTIONS: dict[str, Any] = {
    "model": "echo", "serviceTier": "default", "reasoningLevel": "low", "instructions": "", "envVars": {},
    "permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None,
    "providerOptions": {},
}  # fmt: skip
# Runs in the page: click the row, resolve once `turns` turn ends are in the timeline and a frame has been drawn.
RENDER = """
const [threadId, turns, done] = arguments;
const timeline = document.querySelector("#timeline");
let longest = 0, first = null, finished = false;
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) longest = Math.max(longest, entry.duration);
  }).observe({ type: "longtask" });
} catch (error) {
  longest = -1;
}
const started = performance.now();
const observer = new MutationObserver(() => {
  if (first === null && timeline.querySelector("[data-seq]")) first = performance.now() - started;
  if (finished || timeline.querySelectorAll(".turn-end").length < turns) return;
  finished = true;
  observer.disconnect();
  requestAnimationFrame(() => {
    const ms = performance.now() - started;
    setTimeout(() => done({ ms, first, longest, elements: timeline.querySelectorAll("[data-seq]").length }), 100);
  });
});
observer.observe(timeline, { childList: true, subtree: true });
document.querySelector(`#threads [data-thread-id="${threadId}"]`).click();
"""


def bench_page(events: int, runs: int) -> dict[str, Any]:
    """The figure (or `{"skipped": why}`); every browser and bridge it starts is stopped before it returns."""
    why = chromium.unavailable()
    if why is not None:
        return {"skipped": why}
    return trio.run(_bench, events, runs)


async def _bench(events: int, runs: int) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    echo = ProviderConfig(command=[sys.executable, "-m", "bridges.echo"])
    daemon = Daemon({"echo": echo}, journal=Journal(bound=events * 2), token=token, text_delta_flush_ms=0)
    bound = Bound()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, daemon, [listen_face(ListenSettings(Address("127.0.0.1", 0)), bound)])
        try:
            url = f"ws://127.0.0.1:{bound.ports[0]}/rpc"
            async with Client.connect(url, token=token) as client:
                journal, turns = await _fill(client, events)
            page = f"http://127.0.0.1:{bound.ports[0]}/#token={token}"
            version, timed = await trio.to_thread.run_sync(partial(_render_runs, page, turns, runs))
        finally:
            daemon.request_shutdown()
            with trio.fail_after(20):
                await daemon.stopped.wait()
    rendered = [round(run["ms"]) for run in timed]
    return {
        "events": journal,
        "turns": turns,
        "render_ms": sorted(rendered)[(len(rendered) - 1) // 2],  # the median (the lower middle of an even count)
        "render_ms_runs": rendered,
        "first_event_ms": [round(run["first"]) for run in timed],
        "longest_task_ms": [round(run["longest"]) for run in timed],
        "timeline_elements": timed[0]["elements"],
        "chromium": version,
    }


async def _fill(client: Client, events: int) -> tuple[int, int]:
    """Turns on the echo thread until its journal holds `events` events: (events, turns)."""
    await client.request("thread/start", {"providerId": "echo", "threadId": THREAD, "cwd": "/", "options": OPTIONS})
    last, turns = 0, 0
    with trio.fail_after(120):
        while last < events:
            turns += 1
            prompt = "".join(PARAGRAPH.format(n=turns * 100 + n) for n in range(12)) if turns % 2 else "deltas:all"
            turn = {"threadId": THREAD, "input": [{"type": "text", "text": prompt, "mentions": []}], "options": OPTIONS}
            await client.request("turn/start", turn)
            while True:
                result = await client.thread_events(THREAD, last)
                last = result.lastSeq
                if any(entry.event["type"] == "turn/completed" for entry in result.events):
                    break
                await trio.sleep(0.01)
    return last, turns


def _render_runs(page: str, turns: int, runs: int) -> tuple[str, list[dict[str, float]]]:
    """Chromium's version, and each run's timings."""
    from selenium.common.exceptions import NoSuchElementException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import presence_of_element_located as present
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory(prefix="bbridge-bench-page-") as profile:
        driver = chromium.start(Path(profile) / "profile")
        try:
            timed = []
            for _ in range(runs):
                driver.get("about:blank")  # the page's own URL differs only by its fragment: a new load each run
                driver.get(page)
                wait = WebDriverWait(driver, 15, poll_frequency=0.05, ignored_exceptions=(NoSuchElementException,))
                for ready in ("#connection[data-state=connected]", f'#threads [data-thread-id="{THREAD}"]'):
                    wait.until(present((By.CSS_SELECTOR, ready)), f"the page never showed {ready}")
                timed.append(driver.execute_async_script(RENDER, THREAD, turns))
            return str(driver.capabilities.get("browserVersion", "")), timed
        finally:
            driver.quit()

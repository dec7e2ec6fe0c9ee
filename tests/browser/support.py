"""The harness of the browser tests: Chromium (or a skip saying why not), the daemon's side, and `Page`.

Selenium is synchronous and the daemon runs on this test's trio loop, so every browser call goes through
`Page.call` (a worker thread): the daemon keeps serving while the browser waits. Every wait is a `WebDriverWait`
with a short timeout; its failure names what was awaited.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from bbridge.bench import chromium
from bbridge.client import Client
from bbridge.daemon.config import echo_provider
from tests.conftest import REPO
from tests.listen_support import TOKEN
from tests.live.scenarios import recorded_options
from tests.support import FULL

T = TypeVar("T")
ECHO = echo_provider()  # with the extension kinds its `deltas:all` turn uses
ARTIFACTS_ENV = "BBRIDGE_ARTIFACTS"
DESKTOP = (1280, 800)
PHONE = (390, 844)
_made: list[subprocess.CompletedProcess[str]] = []  # `make browser`, run at most once per session


def artifacts() -> Path:
    """Where this run keeps what it produced for people to look at: `$BBRIDGE_ARTIFACTS`, else `.artifacts/`."""
    where = Path(os.environ.get(ARTIFACTS_ENV) or REPO / ".artifacts")
    where.mkdir(parents=True, exist_ok=True)
    return where


def ensure_browser() -> None:
    """Chromium and chromedriver at their Debian paths, `make browser` run once when either is missing; else skip
    the calling test with the reason (no apt-get, not root, no mirror reachable)."""
    why = chromium.unavailable()
    if why is None:
        return
    if shutil.which("make") and not _made:
        _made.append(subprocess.run(["make", "-s", "browser"], cwd=REPO, capture_output=True, text=True, timeout=900))
        why = chromium.unavailable()
        if why is None:
            return
    if shutil.which("apt-get") is None:
        pytest.skip(f"{why}; this machine has no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip(f"{why}; apt-get needs root to install it")
    made = _made[0] if _made else None
    said = (made.stdout + made.stderr).strip()[-300:] if made else ""
    pytest.skip(f"{why}; make browser (exit {made.returncode if made else 'not run'}) did not install it: {said}")


ECHO_OPTIONS = recorded_options("echo", "", FULL, {})


async def start_echo_thread(client: Client, thread_id: str, cwd: Path) -> None:
    """An echo thread in `cwd`, with full permissions (no turn yet)."""
    start = {"providerId": "echo", "threadId": thread_id, "cwd": str(cwd), "options": ECHO_OPTIONS}
    await client.request("thread/start", start)


def _turn(thread_id: str, text: str) -> dict[str, Any]:
    return {"threadId": thread_id, "input": [{"type": "text", "text": text, "mentions": []}], "options": ECHO_OPTIONS}


async def start_turn(client: Client, thread_id: str, text: str) -> None:
    """A turn of one text input."""
    await client.request("turn/start", _turn(thread_id, text))


async def steer(client: Client, thread_id: str, text: str) -> None:
    """One text input into the thread's latest turn (the journal's last `turn/started`)."""
    entries = (await client.thread_events(thread_id)).events
    (*_, turn_id) = [e.event["scope"]["turnId"] for e in entries if e.event["type"] == "turn/started"]
    await client.request("turn/steer", {**_turn(thread_id, text), "expectedTurnId": turn_id})


async def settled(client: Client, thread_id: str, turns: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
    """The thread's journal once `turns` of its turns have completed (polled, bounded): each entry's seq and
    event."""
    with trio.fail_after(timeout):
        while True:
            entries = [{"seq": e.seq, "event": e.event} for e in (await client.thread_events(thread_id)).events]
            if sum(e["event"]["type"] == "turn/completed" for e in entries) >= turns:
                return entries
            await trio.sleep(0.05)


class Page:
    """The page in one Chromium tab, every call in a worker thread, every wait bounded."""

    def __init__(self, driver: WebDriver) -> None:
        self.driver = driver

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(partial(fn, *args))

    async def open(self, port: int, token: str | None = TOKEN) -> None:
        """`http://127.0.0.1:PORT/`, with `#token=…` when a token is given."""
        fragment = f"#token={token}" if token is not None else ""
        await self.call(self.driver.get, f"http://127.0.0.1:{port}/{fragment}")

    async def until(self, condition: Callable[[WebDriver], T], what: str, timeout: float = 10) -> T:
        """`condition`'s first truthy value, polled every 50 ms; a timeout names `what` was awaited."""
        wait = WebDriverWait(
            self.driver, timeout, poll_frequency=0.05,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        )  # fmt: skip
        result: T = await self.call(wait.until, condition, f"the page never showed {what} in {timeout} s")
        return result

    async def find(self, css: str, text: str = "", timeout: float = 10) -> WebElement:
        """The first displayed element matching `css` whose text contains `text`."""

        def found(driver: WebDriver) -> WebElement | None:
            for element in driver.find_elements(By.CSS_SELECTOR, css):
                if element.is_displayed() and text in element.text:
                    return element
            return None

        return await self.until(found, f"{css} showing {text!r}" if text else css, timeout)

    async def absent(self, css: str, timeout: float = 10) -> None:
        await self.until(lambda driver: not driver.find_elements(By.CSS_SELECTOR, css), f"no {css} left", timeout)

    async def button(self, name: str, within: str = "", timeout: float = 10) -> WebElement:
        """The displayed, enabled button (under `within`) whose accessible name is exactly `name`."""

        def found(driver: WebDriver) -> WebElement | None:
            for element in driver.find_elements(By.CSS_SELECTOR, f"{within} button".strip()):
                if element.is_displayed() and element.is_enabled() and element.accessible_name == name:
                    return element
            return None

        return await self.until(found, f"an enabled button {name!r} in {within or 'the page'}", timeout)

    async def click(self, element: WebElement) -> None:
        await self.call(element.click)

    async def text(self, element: WebElement) -> str:
        """The element's rendered text."""
        shown: str = await self.call(getattr, element, "text")
        return shown

    async def js(self, script: str, *args: Any) -> Any:
        return await self.call(self.driver.execute_script, script, *args)

    async def seqs(self) -> list[int]:
        """Every `data-seq` in the timeline, in document order."""
        found = await self.js(
            "return [...document.querySelectorAll('#timeline [data-seq]')].map(e => Number(e.dataset.seq))"
        )
        return [int(seq) for seq in found]

    async def open_thread(self, thread_id: str) -> None:
        """Click the thread's row in `#threads` and wait until its timeline shows something."""
        await self.click(await self.find(f'#threads [data-thread-id="{thread_id}"]'))
        await self.find("#timeline [data-seq]")

    async def screenshot(
        self, name: str, width: int, height: int, *, phone: bool = False, dark: bool = False, top: str = "body"
    ) -> Path:
        """The viewport at `width`×`height` (light or dark), scrolled to the element `top`, saved as
        `<artifacts>/<name>.png`."""
        await self.call(partial(chromium.viewport, self.driver, width, height, phone=phone, dark=dark))
        await self.js("document.querySelector(arguments[0]).scrollIntoView()", top)
        await trio.sleep(0.3)  # a layout and paint at the new size
        path = artifacts() / f"{name}.png"
        assert await self.call(self.driver.save_screenshot, str(path)), f"Chromium wrote no screenshot to {path}"
        return path

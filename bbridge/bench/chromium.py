"""Debian's Chromium, headless, driven through its chromedriver by Selenium: for the page's bench figure and its
tests in a real browser (tests/browser).

Selenium is a dev dependency, imported only here and only when a browser starts. Both paths are given, so
Selenium Manager never looks for (or downloads) a browser or a driver; `SE_OFFLINE` says so again. The flags keep
Chromium off the network (background networking, component updates and sync would hang on a closed machine) and
give every browser a fresh profile in a folder its caller owns.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # as root, and in containers without user namespaces
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def unavailable() -> str | None:
    """Why Chromium cannot be driven here (None when it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (a dev dependency: pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (`make browser` installs Debian's {package} with apt-get, as root)"
    return None


def start(profile: Path, width: int = 1280, height: int = 800) -> WebDriver:
    """A headless Chromium with a fresh profile under `profile` (created): the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    profile.mkdir(parents=True, exist_ok=True)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    service = Service(str(CHROMEDRIVER), log_output=subprocess.DEVNULL)
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(15)
    driver.set_script_timeout(60)
    return driver


def viewport(driver: WebDriver, width: int, height: int, *, phone: bool = False, dark: bool = False) -> None:
    """The page's viewport exactly `width`×`height` CSS pixels (a phone's when `phone`), and the system's colour
    scheme light or `dark` (what `prefers-color-scheme` reads)."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": phone}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    scheme = [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": scheme})

"""One Chromium per test module (started once: it takes a second or two), quit at the module's end; each test gets
the tab reset to a blank desktop-sized, light page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from bbridge.bench import chromium
from tests.browser.support import DESKTOP, Page, ensure_browser


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    ensure_browser()
    browser = chromium.start(tmp_path_factory.mktemp("chromium") / "profile", *DESKTOP)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def page(driver: WebDriver) -> Iterator[Page]:
    chromium.viewport(driver, *DESKTOP)
    yield Page(driver)
    driver.get("about:blank")

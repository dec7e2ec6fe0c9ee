"""The budgets in the page's daemon view (issue 49), against the echo bridge in headless Chromium: each `[[budgets]]`
entry with what its key nearest the limit spent and the limit, text only, marked once it is past its limit."""

from __future__ import annotations

from pathlib import Path

from bbridge.client import Client
from bbridge.daemon.usage_config import usage_from
from tests.browser.support import ECHO, Page, settled, start_echo_thread, start_turn
from tests.listen_support import TOKEN, listening

SPENDING = usage_from(
    {
        "pricing": {"echo-*": {"input_per_mtok": 1, "output_per_mtok": 2}},
        "budgets": [
            {"name": "tiny", "window": "1d", "tokens": 1, "action": "warn"},
            {
                "name": "<b>roomy</b>",
                "scope": "provider",
                "match": "e*",
                "window": "thread",
                "usd": 50,
                "action": "deny",
            },
        ],
    }
)


async def test_the_daemon_view_shows_each_budget_spent_and_limit(page: Page, tmp_path: Path) -> None:
    assert not SPENDING.refused, SPENDING.refused
    async with listening({"echo": ECHO}, spending=SPENDING) as face, Client.connect(face.url, token=TOKEN) as client:
        await start_echo_thread(client, "thr_spend", tmp_path)
        await start_turn(client, "thr_spend", "spend a little")
        await settled(client, "thr_spend")
        await page.open(face.port)
        tiny = await page.find('#daemon table.budgets tr[data-budget="tiny"]', "tokens")
        roomy = await page.find('#daemon table.budgets tr[data-budget="<b>roomy</b>"]', "$")
        tiny_text, roomy_text = await page.text(tiny), await page.text(roomy)
        over = await page.js(
            "return [...document.querySelectorAll('#daemon table.budgets tr[data-over=\"true\"]')].map(r => r.dataset.budget)"
        )
        bold = await page.js("return document.querySelectorAll('#daemon table.budgets b').length")
    assert "all" in tiny_text and "1d" in tiny_text and "1 tokens" in tiny_text and "warn" in tiny_text
    assert "provider e*" in roomy_text and "echo thr_spend" in roomy_text  # its key nearest the limit
    assert "$0.00" in roomy_text and "$50.00" in roomy_text and "deny" in roomy_text
    assert over == ["tiny"] and bold == 0  # a name is text, never markup

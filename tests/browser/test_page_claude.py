"""The page answers a live Claude Code turn's approvals: the REAL CLI (pinned by `make live-agents`, offline against
the scripted Anthropic API on 127.0.0.1, as in tests/test_claude_live.py), its bridge, the daemon behind a listener,
and the page in headless Chromium."""

from __future__ import annotations

from pathlib import Path

import trio

from bbridge.client import Client
from tests.browser.support import Page, settled
from tests.listen_support import TOKEN, listening
from tests.live.anthropic import AnthropicServer, reply, text, tool_use
from tests.live.claude import ensure_cli, offline_env
from tests.live.processes import no_leftovers
from tests.live.runner import bridge_provider
from tests.live.scenarios import recorded_options, turn_request
from tests.support import ASK

PROVIDER = "claude-code"
THREAD = "thr_page_claude"
OPTIONS = recorded_options("claude-opus-5[1m]", "You are working inside bb.", ASK, {})
ALLOW = {"decision": "allow_once", "grantedPermissions": None}


def claude_or_bridge(argv: list[str]) -> bool:
    return argv[0].endswith("/claude") or "bridges.claude_code" in argv


async def next_request(client: Client, seen: set[str], timeout: float = 30) -> str:
    """The id of a pending request of the thread not in `seen` (polled, bounded)."""
    with trio.fail_after(timeout):
        while True:
            fresh = [p.requestId for p in (await client.pending(THREAD)).pending if p.requestId not in seen]
            if fresh:
                return fresh[0]
            await trio.sleep(0.05)


async def test_allow_once_in_the_page_writes_the_file_and_a_socket_clients_answer_closes_the_card(
    page: Page, tmp_path: Path
) -> None:
    """The model asks to Write two files outside the workspace (each asks the user). The first approval is answered
    by clicking "Allow once" in the page: the file is written. The second, shown in the page too, is answered
    first by a client on the daemon's Unix socket (bbridge.client): the page's card says who answered and closes.
    The turn completes."""
    claude = ensure_cli()
    ws, home, outside = tmp_path / "ws", tmp_path / "home", tmp_path / "outside"
    for folder in (ws, home, outside):
        folder.mkdir()
    first, second = outside / "first.txt", outside / "second.txt"
    with AnthropicServer() as api:
        api.script(
            reply(text("Writing the first."), tool_use("Write", {"file_path": str(first), "content": "first\n"})),
            reply(tool_use("Write", {"file_path": str(second), "content": "second\n"})),
            text("Both written."),
        )
        env = offline_env(api.url, home, extra={"BB_CLAUDE_CODE_EXECUTABLE": str(claude)})
        providers = {PROVIDER: bridge_provider("bridges.claude_code", env, ws)}
        socket = tmp_path / "bb.sock"
        async with listening(providers, socket=socket) as face, Client.connect(socket, token=TOKEN) as client:
            start = {"providerId": PROVIDER, "threadId": THREAD, "cwd": str(ws), "options": OPTIONS}
            ptid = (await client.request("thread/start", start))["providerThreadId"]
            await client.request("turn/start", turn_request(PROVIDER, THREAD, ptid, "Write both notes.", OPTIONS))
            asked = await next_request(client, set())
            await page.open(face.port)
            await page.find(f'#threads [data-thread-id="{THREAD}"][data-waiting="true"]')
            await page.open_thread(THREAD)
            card = f'#pending .pending-card[data-request-id="{asked}"]'
            await page.click(await page.button("Allow once", card))
            again = await next_request(client, {asked})
            assert first.read_text() == "first\n"  # allowed before the model was asked again
            card = f'#pending .pending-card[data-request-id="{again}"]'
            await page.button("Allow once", card)  # shown, unanswered
            await client.respond(again, ALLOW)
            resolved = await page.find(f'{card}[data-resolved="true"] .resolved-by')
            assert "by socket-1 (bbridge.client" in await page.text(resolved)
            await page.absent(card, timeout=15)
            await page.find('#timeline .turn-end[data-status="completed"]', timeout=30)
            journal = await settled(client, THREAD)
    no_leftovers([tmp_path], "a claude CLI or bridge outlived the daemon", claude_or_bridge)
    assert second.read_text() == "second\n"
    assert [e["event"]["status"] for e in journal if e["event"]["type"] == "turn/completed"] == ["completed"]
    assert not [r.target for r in api.requests if r.is_proxy_attempt]

"""The page's serving (no browser: tests/test_page_browser*.py drive Chromium): `/` and every asset with the
Content-Security-Policy and the other page headers, 404 for the rest, the Host check, the static files free of
the DOM's HTML sinks and eval, every asset index.html and the modules name shipped, and where `serve --listen`
says the page is (the token only where a person reads it)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from bbridge import page
from bbridge.daemon.config import echo_provider
from bbridge.daemon.runtime import FORWARDED, OWN_METHODS
from bbridge.wire.openrpc import CLIENT_REQUESTS, DAEMON_METHODS, NOTIFICATIONS
from tests.listen_support import TOKEN, http_get, listening, read_all

PROVIDERS = {"echo": echo_provider()}
STATIC = Path(page.__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}
# What would turn text into markup or code: none may appear in the page's own files.
SINKS = ("innerHTML", "insertAdjacentHTML", "outerHTML", "document.write", "eval(", "new Function", 'setTimeout("')


def _page_headers(headers: dict[str, str]) -> dict[str, str]:
    return {name: headers.get(name, "") for name in PAGE_HEADERS}


async def test_the_page_and_every_asset_are_served_with_the_page_headers() -> None:
    async with listening(PROVIDERS) as face:
        status, headers, body = await http_get(face.port, "/")
        assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
        assert _page_headers(headers) == PAGE_HEADERS
        assert body == (STATIC / "index.html").read_bytes()
        assert len(page.names()) >= 8
        for name in page.names():
            status, headers, body = await http_get(face.port, f"/assets/{name}")
            assert status == 200, name
            assert _page_headers(headers) == PAGE_HEADERS, name
            assert body == (STATIC / name).read_bytes(), name
            expected = {"js": "text/javascript", "css": "text/css", "html": "text/html"}[name.rpartition(".")[2]]
            assert headers["content-type"] == f"{expected}; charset=utf-8", name


async def test_unknown_assets_and_paths_are_404_and_the_host_check_applies() -> None:
    async with listening(PROVIDERS) as face:
        for path in ("/assets/nothing.js", "/assets/../pyproject.toml", "/assets/", "/assets/static/app.js"):
            status, headers, _ = await http_get(face.port, path)
            assert status == 404, path
            assert _page_headers(headers) == PAGE_HEADERS, path
        assert (await http_get(face.port, "/index.html"))[0] == 404
        for path in ("/", "/assets/app.js"):
            status, _, body = await http_get(face.port, path, {"Host": "rebound.example"})
            assert status == 403 and b"not this listener's address" in body, path
        assert (await http_get(face.port, "/", {"Host": f"localhost:{face.port}"}))[0] == 200


async def test_a_head_request_is_answered_without_a_body_and_the_listener_stays_up() -> None:
    async with listening(PROVIDERS) as face:
        raw = await _request(face.port, "HEAD / HTTP/1.1")
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and body == b""
        assert b"content-security-policy" in head.lower()
        assert (await http_get(face.port, "/healthz"))[0] == 200


async def _request(port: int, line: str) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"{line}\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        return await read_all(stream)


def test_the_static_files_have_no_html_sinks_and_no_eval() -> None:
    found = [
        f"{path.name}:{number}: {sink}"
        for path in sorted(STATIC.iterdir())
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for sink in SINKS
        if sink in line
    ]
    assert found == []
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "an inline script (the CSP would refuse it)"
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler (the CSP would refuse it)"
    assert "<style" not in html and " style=" not in html, "inline style (the CSP would refuse it)"


def test_every_asset_the_page_names_is_shipped() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    named = set(re.findall(r'(?:src|href)="/assets/([^"]+)"', html))
    assert {"app.js", "style.css"} <= named
    for module in STATIC.glob("*.js"):
        named |= set(re.findall(r'from "\./([^"]+)"', module.read_text(encoding="utf-8")))
    missing = sorted(name for name in named if page.asset(name) is None)
    assert missing == []
    unused = sorted(set(page.names()) - named - {"index.html"})
    assert unused == [], "shipped but never loaded"
    assert page.asset("../__init__.py") is None and page.asset("") is None


def test_every_method_and_notification_the_page_uses_is_the_daemons() -> None:
    """The page asks only what the daemon answers (its own methods, the bridge methods it forwards, a room's the
    OpenRPC document names: `perspectives/runs`, -32601 without the room) and listens for what it sends (its
    notifications, its relayed requests): the prompts' text from `thread/inputs` and `thread/input`, for one."""
    source = "\n".join(module.read_text(encoding="utf-8") for module in STATIC.glob("*.js"))
    asked = set(re.findall(r'request\(\s*"([a-z/]+)"', source))
    heard = set(re.findall(r'(?<![.\w])method === "([a-z/]+)"', source))  # a notification's or request's name
    assert {"thread/inputs", "thread/events", "daemon/status"} <= asked
    assert {"thread/input", "thread/events"} <= heard
    assert "perspectives/runs" in asked
    assert sorted(asked - set(OWN_METHODS) - set(FORWARDED) - set(DAEMON_METHODS)) == []
    assert sorted(heard - set(NOTIFICATIONS) - set(CLIENT_REQUESTS)) == []


def _serve(tmp_path: Path, *flags: str) -> str:
    """`bbridge serve --listen 127.0.0.1:0` until it listens, then stopped: its stderr."""
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    errors = tmp_path / "stderr.log"
    command = [sys.executable, "-m", "bbridge", "serve", "--listen", "127.0.0.1:0", "--token-file", str(token)]
    with errors.open("w") as sink:
        process = subprocess.Popen([*command, *flags], stderr=sink, stdin=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while '"listening"' not in errors.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, "serve --listen did not start"
            time.sleep(0.1)
        time.sleep(0.2)  # the page's line follows the listening one
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a daemon that ignores SIGTERM
            process.kill()
            process.wait()
    return errors.read_text()


def test_print_url_prints_the_page_with_the_token_in_the_fragment(tmp_path: Path) -> None:
    stderr = _serve(tmp_path, "--print-url")
    lines = [line for line in stderr.splitlines() if TOKEN in line]
    assert len(lines) == 1, stderr
    assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/#token={TOKEN}", lines[0]), lines[0]


def test_without_print_url_the_log_names_the_page_and_the_token_file_but_not_the_token(tmp_path: Path) -> None:
    stderr = _serve(tmp_path)
    assert TOKEN not in stderr
    assert re.search(r'"url": "http://127\.0\.0\.1:\d+/"', stderr), stderr
    assert str(tmp_path / "token") in stderr


def test_print_url_needs_listen(tmp_path: Path) -> None:
    serve = [sys.executable, "-m", "bbridge", "serve", "--print-url"]
    done = subprocess.run(serve, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "--print-url needs --listen" in done.stderr

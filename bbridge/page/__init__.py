"""The page (`GET /` on a `--listen` address): hand-written ES modules, one stylesheet and one HTML file shipped
as package data, served as they are. No build step, no CDN: what is installed is what the browser runs.

`asset(name)` looks a file up by its name under `static/` (`index.html` for `/`); the files are read once, at the
first lookup, and kept: a page is a few dozen KiB, and a name outside the set (`../x`, a directory) is simply
absent, so no path from a request ever reaches the filesystem.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

# Every page response carries these: no inline script or style, nothing from another origin, no framing, no
# referrer (the token lives in the URL's fragment, which browsers never send, but a link's Referer would name the
# page), no sniffing, no caching of a page that changes with the installed version.
HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


@cache
def _assets() -> dict[str, tuple[str, bytes]]:
    static = resources.files(__name__) / "static"
    found = {}
    for entry in static.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in TYPES:
            found[entry.name] = (TYPES[suffix], entry.read_bytes())
    return found


def asset(name: str) -> tuple[str, bytes] | None:
    """The content type and bytes of the page's file `name` (`index.html`, `app.js`, …), None when there is none."""
    return _assets().get(name)


def names() -> list[str]:
    """Every file the page ships."""
    return sorted(_assets())

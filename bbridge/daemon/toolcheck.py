"""The tool-argument checker process, `python -m bbridge.daemon.toolcheck`, spawned by `daemon/declared_tools.py`.

It reads one request per line on stdin, `{"schema": "<canonical schema JSON text>", "arguments": <any>}`,
and writes one answer per line on stdout: `{"ok": true}`, or `{"ok": false, "path": "<JSON pointer>",
"reason": "<jsonschema message>"}` for the most relevant failure (`jsonschema.exceptions.best_match`), or
`{"error": "<text>"}` when the request itself is unusable. Validators are `Draft202012Validator`s built once
per distinct schema text and kept (up to `MAX_VALIDATORS`, least recently used first out).

Validation runs here, in its own process, because nothing inside the daemon can bound it: jsonschema's
`pattern` runs Python's `re`, which holds the GIL for a whole match, so a catastrophic pattern would freeze
every thread of the daemon, worker threads included. The daemon gives each check a deadline and kills this
process when it is missed. The process exits at EOF on stdin and, on Linux, when the daemon dies
(`PR_SET_PDEATHSIG`), so a check stuck in a regex never outlives the daemon. The kernel sends that signal when
the *thread* that forked this process exits, so the daemon forks it from its event loop's thread, never from a
worker thread (those exit when idle); and the daemon's pid, the one argument, closes the window before `prctl`:
a daemon already gone by then leaves this process another parent, and it exits at once.

Stdlib and jsonschema only, so it starts fast and shares nothing with the daemon's event loop.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import jsonschema

MAX_VALIDATORS = 256
MAX_REASON_CHARS = 500  # jsonschema messages quote the instance, which may be large


def pointer(path: Iterable[Any]) -> str:
    """A JSON pointer (RFC 6901) for a jsonschema error path; `(root)` for the arguments themselves."""
    parts = [str(part).replace("~", "~0").replace("/", "~1") for part in path]
    return "/" + "/".join(parts) if parts else "(root)"


def first_failure(validator: jsonschema.protocols.Validator, arguments: Any) -> tuple[str, str] | None:
    """The most relevant failure as (JSON pointer, reason), or None when the arguments are valid."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    reason = error.message
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    return pointer(error.absolute_path), reason


class Validators:
    """Draft 2020-12 validators keyed by the schema's canonical JSON text (schemas were checked at declaration)."""

    def __init__(self, limit: int = MAX_VALIDATORS) -> None:
        self._limit = limit
        self._cache: OrderedDict[str, jsonschema.protocols.Validator] = OrderedDict()

    def get(self, schema_text: str) -> jsonschema.protocols.Validator:
        validator = self._cache.get(schema_text)
        if validator is None:
            validator = self._cache[schema_text] = jsonschema.Draft202012Validator(json.loads(schema_text))
            if len(self._cache) > self._limit:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(schema_text)
        return validator


def answer(validators: Validators, line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line)
        schema_text = request["schema"]
        arguments = request["arguments"]
        validator = validators.get(schema_text)
    except (ValueError, KeyError, TypeError, jsonschema.exceptions.SchemaError) as exc:
        return {"error": f"unusable check request: {exc}"}
    try:
        failure = first_failure(validator, arguments)
    except RecursionError:
        failure = ("(root)", "the arguments are nested too deeply to check against this schema")
    if failure is None:
        return {"ok": True}
    return {"ok": False, "path": failure[0], "reason": failure[1]}


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL when the daemon's forking thread exits; exit now if `parent` (the daemon's pid) is gone already."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(0)


def main() -> None:
    _die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is the daemon's to handle
    validators = Validators()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    for line in stdin:
        if not line.strip():
            continue
        stdout.write(json.dumps(answer(validators, line), ensure_ascii=False).encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    main()

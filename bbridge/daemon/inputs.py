"""Turn inputs as thread state (issue 34): what each client asked of a thread, beside its canonical events.

A canonical `turn/input/accepted` event carries only the input's `clientRequestId` (the reference's events keep
no prompt text, and ours match them byte for byte). So when a bridge accepts a forwarded `turn/start` or
`turn/steer` (`methods.TurnInput`), the daemon keeps the input here: `{clientRequestId, method, input, sentAt,
client}` — the `input` array as sent, when the daemon received it, and who sent it (the connection's name and
what it called itself in `initialize`). A refused turn keeps nothing. Every client is told
(`thread/input`); `thread/inputs {threadId, afterSentAt?}` lists a thread's, oldest first, so a client matches
each to the `turn/input/accepted` event with the same `clientRequestId`.

Bounded: the newest `INPUTS_BOUND` inputs per thread, and `MAX_INPUT_BYTES` of text per input (longer strings
are cut, and the record says `truncated: true`). With `--journal`, appended to `<thread>.inputs.ndjson` beside
the thread's events and read back (its newest `INPUTS_BOUND`) the first time a thread's inputs are asked for or
added to after a restart, or after the thread was released (`let_go`: a released thread holds none in memory);
a file past twice the bound is cut to it then, or when an input takes it there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bbridge.daemon.journal import append_record, beside, read_records, replace_records
from bbridge.wire import rpc

log = structlog.get_logger("bbridge.daemon.inputs")

INPUTS_BOUND = 1000
MAX_INPUT_BYTES = 32 * 1024
KIND = "inputs"


def bounded(elements: list[Any], limit: int = MAX_INPUT_BYTES) -> tuple[list[Any], bool]:
    """The input within `limit` bytes in all (but each element's `type`): strings cut at a character, a nested
    value (a text's `mentions`) left out when it does not fit; and whether anything was."""
    budget, cut, kept = limit, False, []
    for element in elements:
        if not isinstance(element, dict):
            kept.append(element)
            continue
        copy: dict[str, Any] = {}
        for key, value in element.items():
            if isinstance(value, str) and key != "type":
                data = value.encode("utf-8", "surrogatepass")
                if len(data) > budget:
                    value, cut = data[:budget].decode("utf-8", "ignore"), True
                budget -= min(len(data), budget)
            elif isinstance(value, (list, dict)):
                size = len(msgspec.json.encode(value))
                if size > budget:
                    cut = True
                    continue
                budget -= size
            copy[key] = value
        kept.append(copy)
    return kept, cut


class Inputs:
    """Each thread's recent turn inputs, told to every client as they are kept."""

    def __init__(self, broadcast: Callable[[list[bytes]], Any], directory: Path | None = None) -> None:
        self._broadcast = broadcast
        self._directory = directory
        self.held: dict[str, deque[dict[str, Any]]] = {}
        self._unwritten: set[str] = set()  # threads an input of which the file did not take: held until a restart
        self._lines: dict[str, int] = {}  # the lines of each held thread's file, as far as this process knows

    def add(
        self,
        thread_id: str,
        provider_id: str,
        elements: list[Any],
        client_request_id: str | None,
        method: str,
        sent_at: float,
        client: dict[str, str],
    ) -> None:
        """A forwarded `turn/start` or `turn/steer` its bridge accepted (its `input` as the client sent it)."""
        kept, cut = bounded(elements)
        record: dict[str, Any] = {
            "clientRequestId": client_request_id,
            "method": method,
            "input": kept,
            "sentAt": sent_at,
            "client": client,
        }
        if cut:
            record["truncated"] = True
        held = self._of(thread_id)
        held.append(record)
        if self._directory is not None:
            path = beside(self._directory, thread_id, KIND)
            try:
                lines = self._lines.get(thread_id, len(held) - 1) + 1
                if lines > 2 * INPUTS_BOUND:  # cut to the bound as it grows, not only when read back
                    replace_records(path, held)
                    lines = len(held)
                else:
                    append_record(path, record)
                self._lines[thread_id] = lines
            except OSError as exc:
                self._unwritten.add(thread_id)
                log.warning("could not journal a turn input", threadId=thread_id, error=str(exc))
        notice = {"threadId": thread_id, "providerId": provider_id, **record}
        self._broadcast([rpc.encode_notification("thread/input", notice)])

    def listing(self, thread_id: str, after_sent_at: float | None) -> dict[str, Any]:
        """`thread/inputs`: the thread's kept inputs (those sent after `after_sent_at`), oldest first."""
        held = self._of(thread_id, keep=False)
        if after_sent_at is None:
            return {"inputs": list(held)}
        return {"inputs": [record for record in held if record.get("sentAt", 0) > after_sent_at]}

    def client_of(self, thread_id: str, client_request_id: str | None) -> dict[str, str] | None:
        """Who sent the thread's input `client_request_id` (None: its latest `turn/start`'s sender), if kept."""
        for record in reversed(self._of(thread_id, keep=False)):
            if record.get("clientRequestId") == client_request_id or (
                client_request_id is None and record.get("method") == "turn/start"
            ):
                client = record.get("client")
                return client if isinstance(client, dict) else None
        return None

    def let_go(self, thread_id: str) -> None:
        """The thread was released (`threads.Piece.INPUTS`): with a journal, its inputs are no longer held (its file
        has them); without one, or when its file missed one, they are, since nothing else has them all."""
        if self._directory is not None and thread_id not in self._unwritten:
            self.held.pop(thread_id, None)
            self._lines.pop(thread_id, None)

    def _of(self, thread_id: str, keep: bool = True) -> deque[dict[str, Any]]:
        """The thread's inputs, read from its journal first after a restart; `keep`: held from now on even if none
        (a question about a thread that has none holds nothing)."""
        held = self.held.get(thread_id)
        if held is None:
            path = None if self._directory is None else beside(self._directory, thread_id, KIND)
            held = deque([] if path is None else read_records(path, INPUTS_BOUND, trim=True), maxlen=INPUTS_BOUND)
            if keep or held:
                self.held[thread_id] = held
        return held

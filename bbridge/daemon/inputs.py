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
the thread's events, which then has them all: memory holds only a thread's inputs added since it was last released
(`let_go`) or the daemon started (what `client_of` asks for, the sender of a running turn), and `thread/inputs`
reads the file's newest `INPUTS_BOUND`. Adding one never reads the file back (the first one a process adds counts
its lines); a file past twice the bound is cut to it when an input takes it there, or when it is read.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bbridge.daemon.journal import append_record, beside, count_lines, read_records, replace_records
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
    """Each thread's recent turn inputs, told to every client as they are kept.

    `held` is, per thread, without a journal (or for a thread whose file missed an input) all its kept inputs; with
    one, only those added since the thread was last let go (or the daemon started): its file has them all, and
    adding one never reads it back."""

    def __init__(self, broadcast: Callable[[list[bytes]], Any], directory: Path | None = None) -> None:
        self._broadcast = broadcast
        self._directory = directory
        self.held: dict[str, deque[dict[str, Any]]] = {}
        self._unwritten: set[str] = set()  # threads an input of which the file did not take: held until a restart
        self._lines: dict[str, int] = {}  # the lines of each thread's file, as far as this process knows

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
        held = self.held.get(thread_id)
        if held is None:
            held = self.held[thread_id] = deque(maxlen=INPUTS_BOUND)
        held.append(record)
        if self._directory is not None:
            self._journal(thread_id, beside(self._directory, thread_id, KIND), record)
        notice = {"threadId": thread_id, "providerId": provider_id, **record}
        self._broadcast([rpc.encode_notification("thread/input", notice)])

    def _journal(self, thread_id: str, path: Path, record: dict[str, Any]) -> None:
        """Appends the input to the thread's file, cut to the bound once past twice it. A file that misses one
        leaves the thread's inputs in memory (what the file had, and this one) until a restart."""
        try:
            lines = self._lines.get(thread_id)
            if lines is None:  # the first input this process adds: the file's lines, counted, not decoded
                lines = count_lines(path)
            append_record(path, record)
            lines += 1
            if lines > 2 * INPUTS_BOUND:  # cut to the bound as it grows, not only when read back
                if thread_id in self._unwritten:
                    replace_records(path, self.held[thread_id])
                    lines = len(self.held[thread_id])
                else:
                    lines = len(read_records(path, INPUTS_BOUND, trim=True))
            self._lines[thread_id] = lines
        except OSError as exc:
            if thread_id not in self._unwritten:  # memory has all from now on: what the file had, and what it missed
                self._unwritten.add(thread_id)
                with contextlib.suppress(OSError):  # unreadable too: those added since its release, at least
                    before = read_records(path, INPUTS_BOUND, strict=True)
                    self.held[thread_id] = deque([*before, record], maxlen=INPUTS_BOUND)
            log.warning("could not journal a turn input", threadId=thread_id, error=str(exc))

    def listing(self, thread_id: str, after_sent_at: float | None) -> dict[str, Any]:
        """`thread/inputs`: the thread's kept inputs (those sent after `after_sent_at`), oldest first."""
        every = self._every(thread_id)
        if after_sent_at is None:
            return {"inputs": list(every)}
        return {"inputs": [record for record in every if record.get("sentAt", 0) > after_sent_at]}

    def client_of(self, thread_id: str, client_request_id: str | None) -> dict[str, str] | None:
        """Who sent the thread's input `client_request_id` (None: its latest `turn/start`'s sender), if kept: looked
        for among those held first (a turn's own input is, since a thread with a turn is not let go)."""
        held = self.held.get(thread_id, ())
        found = _sender(held, client_request_id)
        if found is None and self._journaled(thread_id):
            found = _sender(self._every(thread_id), client_request_id)
        return found

    def let_go(self, thread_id: str) -> None:
        """The thread was released (`threads.Piece.INPUTS`): with a journal, its inputs are no longer held (its file
        has them); without one, or when its file missed one, they are, since nothing else has them all."""
        if self._journaled(thread_id):
            self.held.pop(thread_id, None)

    def _journaled(self, thread_id: str) -> bool:
        """The thread's file has every input it kept (so memory need not)."""
        return self._directory is not None and thread_id not in self._unwritten

    def _every(self, thread_id: str) -> Sequence[dict[str, Any]]:
        """All the thread's kept inputs: its file's newest `INPUTS_BOUND` when it has them all (read, not held; a
        file past twice the bound is cut to it), else those held."""
        if not self._journaled(thread_id):
            return self.held.get(thread_id, ())
        assert self._directory is not None  # a file whose lines this process counts never passes twice the bound
        return read_records(beside(self._directory, thread_id, KIND), INPUTS_BOUND, trim=True)


def _sender(records: Sequence[dict[str, Any]], client_request_id: str | None) -> dict[str, str] | None:
    """`client_of` within `records`, newest first."""
    for record in reversed(records):
        if record.get("clientRequestId") == client_request_id or (
            client_request_id is None and record.get("method") == "turn/start"
        ):
            client = record.get("client")
            return client if isinstance(client, dict) else None
    return None

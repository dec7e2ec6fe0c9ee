"""Hidden threads (issue 48): threads a room above the daemon runs for itself (a Perspectives run's planner, workers,
synthesis, expert), marked by their construction's `hidden {runId, role}`.

A hidden thread is an ordinary thread (journaled, addressable by id: `thread/events`, `thread/inputs`, `bbridge
tail --thread`), but listings leave it out: `daemon/status` shows it only with `includeHidden`, and clients that
list threads (the page, `bbridge tail`) learn which to leave out from `thread/hidden`, sent to every client when the
construction is about to reach its bridge, before any of its events. The mark lives on the thread's record
(`ThreadRecord.hidden`) and, with `--journal`, in `<thread>.hidden.ndjson` beside its events, read back at start,
so a restarted daemon still hides it. The mark is sticky: a later construction without `hidden` keeps it, one with
`hidden` replaces it. Releasing a hidden thread is its room's job (`thread/stop {intent: release}`); its journal
stays.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from bbridge.daemon.journal import append_record, beside, latest_beside
from bbridge.daemon.threads import ThreadRegistry
from bbridge.wire import rpc
from bbridge.wire.client_api import HiddenThread

log = structlog.get_logger("bbridge.daemon.hidden")

KIND = "hidden"  # `<thread>.hidden.ndjson`


class HiddenThreads:
    """Marks threads hidden on their records, keeps the marks beside the journal and tells every client."""

    def __init__(
        self, registry: ThreadRegistry, broadcast: Callable[[list[bytes]], Any], directory: Path | None
    ) -> None:
        self._registry = registry
        self._broadcast = broadcast
        self._directory = directory
        self.read_back()

    def mark(self, thread_id: str, provider_id: str, mark: HiddenThread) -> None:
        """A construction with `hidden`, about to be sent to its bridge: marked, kept, told (`thread/hidden`)."""
        self._registry.hide(thread_id, mark)
        record = {"threadId": thread_id, "providerId": provider_id, "runId": mark.runId, "role": mark.role}
        if self._directory is not None:
            try:
                append_record(beside(self._directory, thread_id, KIND), record)
            except OSError as exc:
                log.warning("could not journal a thread's hidden mark", threadId=thread_id, error=str(exc))
        self._broadcast([rpc.encode_notification("thread/hidden", record)])

    def read_back(self) -> None:
        """A restart: each journaled thread's latest mark, back on its record (a malformed one is skipped)."""
        if self._directory is None:
            return
        for record in latest_beside(self._directory, KIND):
            thread_id = record.get("threadId")
            try:
                mark = msgspec.convert({"runId": record.get("runId"), "role": record.get("role")}, HiddenThread)
            except msgspec.ValidationError:
                continue
            if isinstance(thread_id, str):
                self._registry.hide(thread_id, mark)

    def count(self) -> int:
        """How many threads are hidden (`daemon/status`'s `daemon.hiddenThreads`)."""
        return sum(record.hidden is not None for record in self._registry.records.values())

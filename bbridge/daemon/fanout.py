"""Who hears the daemon: the connected clients, what each called itself, the journal every event goes
through on its way to them, and the tracer (`seams/telemetry.py`: `NO_TRACER` without `[telemetry]`), which the
parts that make spans reach through here.

Every part that speaks to clients does it here: `broadcast` hands encoded lines to every client in order,
`publish` journals daemon-made events first (a watchdog's, a dead bridge's settlement). The part owns the client
list; `changed` is replaced whenever a client comes or goes, for what waits on there being one (a pending
request's timeout policy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import trio

from bbridge.core.events import Event
from bbridge.daemon.journal import Journal
from bbridge.seams.telemetry import NO_TRACER, Tracer
from bbridge.wire.client_api import ClientInfo


class ClientSink(Protocol):
    """What the daemon needs of a connected client (a socket, stdio or WebSocket connection, or an in-process
    driver such as `tools/record_echo_cells.py`'s)."""

    name: str
    transport: str  # stdio | socket | ws | in-process: what `daemon/status` counts clients by

    def enqueue(self, lines: list[bytes]) -> None:
        """Queue encoded notifications, in order; never blocks (a slow client is dropped instead)."""

    async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        """Ask the client to answer a bridge's request."""
        ...


class Fanout:
    """The clients, in the order they connected, the journal in front of them, and the tracer beside it."""

    def __init__(self, journal: Journal, tracer: Tracer = NO_TRACER) -> None:
        self.journal = journal
        self.tracer = tracer
        self.clients: list[ClientSink] = []
        self.info: dict[ClientSink, dict[str, str]] = {}  # what each client called itself in initialize
        self.changed = trio.Event()  # replaced (after being set) whenever a client comes or goes
        # who else hears of daemon-made events (the usage ledger: a dead bridge's settled turns), after the journal
        self.published: Callable[[str, str, list[Event]], None] | None = None

    def add(self, client: ClientSink) -> None:
        self.clients.append(client)
        self._changed()

    def remove(self, client: ClientSink) -> None:
        if client in self.clients:
            self.clients.remove(client)
            self._changed()
        self.info.pop(client, None)

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def named(self, client: ClientSink, info: ClientInfo) -> None:
        """`initialize`'s `client {name, version}`, kept to sign the client's answers and inputs with."""
        self.info[client] = {"name": info.name, "version": info.version}

    def signature(self, client: ClientSink) -> dict[str, str]:
        """The client as a turn input records it: its connection's name and what it called itself."""
        return {"connection": client.name, **self.info.get(client, {})}

    def answering(self, owner: ClientSink | None) -> ClientSink | None:
        """Who is asked a thread's question: its owner while connected, else the last client to connect."""
        if owner is not None and owner in self.clients:
            return owner
        return self.clients[-1] if self.clients else None

    def broadcast(self, lines: list[bytes]) -> list[bytes]:
        """Hands the lines to every client, in order; returns a fresh list for the caller's next lines."""
        if lines:
            for client in list(self.clients):
                client.enqueue(lines)
        return []

    def publish(self, thread_id: str, provider_id: str, events: list[Event]) -> None:
        """Daemon-made events past any bridge's guard (its bridge is gone, or a watchdog speaks): journaled, out."""
        self.broadcast([self.journal.log.record(thread_id, provider_id, events)])
        if self.tracer.enabled:  # a dead bridge's settlement ends its turns' spans
            self.tracer.noticed(provider_id, [(thread_id, event) for event in events])
        if self.published is not None:
            self.published(thread_id, provider_id, events)

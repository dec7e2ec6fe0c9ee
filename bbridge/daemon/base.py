"""What every part of the daemon shares: the client interface, the counters, and the daemon's state.

`Daemon` (`router.py`) is one object assembled from its concerns — delivery of bridge output
(`delivery.py`), relayed bridge requests and pending interactions (`relays.py`), the live view
(`status.py`) — each a mixin over `DaemonState`, which declares the state they read and write so each
module type-checks on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from bbridge.daemon.bridge import BridgeProcess
    from bbridge.daemon.config import ConfigReport, ProviderConfig
    from bbridge.daemon.declared_tools import Checker, Declarations
    from bbridge.daemon.extensions import ExtensionChecker
    from bbridge.daemon.hosted import HostedTools
    from bbridge.daemon.journal import Journal
    from bbridge.daemon.mistakes import Mistakes
    from bbridge.daemon.pending import Interactions
    from bbridge.daemon.threads import ThreadRegistry
    from bbridge.daemon.tracker import Tracker

DAEMON_INFO = {"name": "bbridge", "version": "0.1.0"}
CLIENT_PROTOCOL_VERSION = 1


class ClientSink(Protocol):
    """What the daemon needs of a connected client (a socket/stdio client, or an in-process driver such as
    `tools/record_echo_cells.py`'s)."""

    name: str
    transport: str  # stdio | socket | ws | in-process: what `daemon/status` counts clients by

    def enqueue(self, lines: list[bytes]) -> None:
        """Queue encoded notifications, in order; never blocks (a slow client is dropped instead)."""

    async def relay(self, method: str, params: dict[str, Any]) -> msgspec.Raw:
        """Ask the client to answer a bridge's request."""
        ...


@dataclass
class Counters:
    deltas_in: int = 0
    notifications_in: int = 0
    events_out: int = 0  # the journal's count, copied in when the status is read
    rejected_notifications: int = 0
    grammar_drops: int = 0
    suspect_closes: int = 0  # closes the grammar lets pass but a bridge rarely means (`bbridge run --strict`)
    unhandled_extensions: int = 0
    clients_disconnected_slow: int = 0
    rejected_bridge_requests: int = 0  # schema-invalid item/tool/call or interaction/request (protocol.md §1.5)
    failed_notifications: int = 0  # a handler error: that notification is lost, the rest of its batch is not
    tool_calls_relayed: int = 0  # item/tool/call that passed its checks and went to the client
    tool_calls_refused: int = 0  # answered failed at once: undeclared tool, arguments invalid, too large or unchecked
    tool_calls_failed: int = 0  # relayed, then the client answered an error or an invalid tool result
    interactions_opened: int = 0  # pending requests (interactions and relayed tool calls) opened
    interactions_by_policy: int = 0  # resolved by the daemon: timeout with no client, thread stop, bridge exit
    hosted_calls: int = 0  # item/tool/call of a hosted tool, handed to the tool host (no client asked)
    hosted_calls_failed: int = 0  # answered with a failed result by the host (its policy, the tool) or invalid
    hosted_calls_cancelled: int = 0  # cancelled by a thread/stop, the thread's release or its bridge's exit
    hosted_asks: int = 0  # approvals a hosted call asked for (pending interaction/request)
    hosted_asks_allowed: int = 0  # of those, answered allow_once or allow_for_session


TURN_BUCKETS_S: tuple[float, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)


class TurnDurations:
    """Turn durations per provider, started to completed, as cumulative histogram buckets (`/metrics`)."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}  # per provider: one count per bucket, then the +Inf bucket
        self._sums: dict[str, float] = {}

    def observe(self, provider_id: str, seconds: float) -> None:
        counts = self._counts.get(provider_id)
        if counts is None:
            counts = self._counts[provider_id] = [0] * (len(TURN_BUCKETS_S) + 1)
            self._sums[provider_id] = 0.0
        index = next((i for i, bound in enumerate(TURN_BUCKETS_S) if seconds <= bound), len(TURN_BUCKETS_S))
        counts[index] += 1
        self._sums[provider_id] += seconds

    def view(self) -> dict[str, dict[str, Any]]:
        """`daemon/status`'s `turnDurations`: per provider, `buckets` as [upper bound (null: +Inf), cumulative
        count] pairs, `count` and `sumS`."""
        out: dict[str, dict[str, Any]] = {}
        for provider_id, counts in self._counts.items():
            total, buckets = 0, []
            for bound, count in zip((*TURN_BUCKETS_S, None), counts, strict=True):
                total += count
                buckets.append([bound, total])
            out[provider_id] = {"buckets": buckets, "count": total, "sumS": round(self._sums[provider_id], 3)}
        return out


class DaemonState:
    """The attributes `Daemon.__init__` sets, declared for the mixins."""

    providers: dict[str, ProviderConfig]
    config: ConfigReport
    journal: Journal
    record_dir: Path | None
    text_delta_flush_ms: float
    counters: Counters
    turn_durations: TurnDurations
    tracker: Tracker
    mistakes: Mistakes
    bridges: dict[str, BridgeProcess]
    start_failures: dict[str, str]  # provider id -> why its last start failed (until a start succeeds)
    registry: ThreadRegistry
    declarations: Declarations
    hosted: HostedTools
    checker: Checker
    clients: list[ClientSink]
    client_info: dict[ClientSink, dict[str, str]]
    extensions: dict[str, ExtensionChecker]
    interactions: Interactions
    clients_changed: trio.Event
    _flush_wake: trio.Event
    _flusher_idle: bool
    _nursery: trio.Nursery | None
    _started_at: float
    # a `provider/warning` the daemon makes on a thread (bridge, thread id, summary, details): delivery.py's
    _deliver_warning: Callable[[BridgeProcess, str, str, str | None], None]

"""What the daemon counts for `daemon/status` and `/metrics`: its counters and turn durations, and what it
calls itself in `initialize`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DAEMON_INFO = {"name": "bbridge", "version": "0.1.0"}
CLIENT_PROTOCOL_VERSION = 1


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
    idle_releases: int = 0  # threads the daemon released idle (`idle_release_s`)
    idle_resumes: int = 0  # of those, resumed by their next turn
    idle_bridge_stops: int = 0  # bridges stopped with no live thread (`bridge_idle_exit_s`)


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

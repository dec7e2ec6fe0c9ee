"""`daemon/status`: the daemon, its providers, counters, configuration and journal, and a live view of every
thread — its open turn and that turn's age, how long since its bridge last sent anything for it, what it waits
on (pending approvals, questions and tool calls, each with its age), the clients attached, its bridge's pid and
state. A thread's live part is read from its record (`ThreadRegistry.liveness`); a row that names no bridge (no
client constructed the thread, or its provider has no bridge running) shows no turn and no pending start."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import msgspec
import trio

from bbridge.core import native
from bbridge.daemon.base import DAEMON_INFO, DaemonState


class StatusMixin(DaemonState):
    def status(self) -> dict[str, Any]:
        now = trio.current_time()
        self.counters.events_out = self.journal.log.recorded
        providers = []
        for pid in sorted(self.providers):
            bridge = self.bridges.get(pid)
            entry: dict[str, Any] = {"providerId": pid, **self.provider_state(pid)}
            if bridge is not None:
                entry.update(
                    pid=bridge.pid,
                    capabilities=msgspec.to_builtins(bridge.capabilities),
                    uptimeS=round(now - bridge.started_at, 3),
                    threads=len(bridge.threads),
                )
            providers.append(entry)
        return {
            "daemon": {
                **DAEMON_INFO,
                "uptimeS": round(time.time() - self._started_at, 3),
                "clients": len(self.clients),
                "clientsByTransport": dict(Counter(client.transport for client in self.clients)),
                "core": native.describe(),  # compiled (mypyc) or pure, and why
            },
            "providers": providers,
            "threads": list(self._thread_status(now)),
            "pending": len(self.interactions.open),
            "counters": msgspec.to_builtins(self.counters),
            "config": msgspec.to_builtins(self.config),
            "journal": self.journal.health(),
            "turnDurations": self.turn_durations.view(),
            "hostedTools": self.hosted.status(),
        }

    def provider_state(self, provider_id: str) -> dict[str, str]:
        """`{state[, reason]}`: its bridge's state; with none running, `failed` and why when its last start
        failed (the next request tries again), else `idle`."""
        bridge = self.bridges.get(provider_id)
        if bridge is not None:
            return {"state": bridge.state, **({"reason": bridge.reason} if bridge.reason else {})}
        reason = self.start_failures.get(provider_id)
        return {"state": "failed", "reason": reason} if reason is not None else {"state": "idle"}

    def _thread_status(self, now: float) -> Iterable[dict[str, Any]]:
        tracked = self.tracker.threads()
        known = dict(self.journal.threads())
        for thread_id, record in self.registry.records.items():
            if record.pending:
                known.setdefault(thread_id, 0)
        for thread_id, last_seq in sorted(known.items()):
            provider_id = self.registry.provider_of(thread_id)
            bridge = self.bridges.get(provider_id) if provider_id else None
            work = tracked.get(thread_id)
            live = self.registry.liveness(thread_id, now)
            turn_age, silence = (live.turn_age_s, live.silence_s) if bridge else (None, None)
            owner = self.registry.owner_of(thread_id)
            yield {
                "threadId": thread_id,
                "providerId": provider_id,
                "providerThreadId": self.registry.provider_threads.get(thread_id),
                "name": self.registry.name_of(thread_id),  # the latest thread/name/updated; null: none this run
                "openTurns": list(work.open_turns) if work else [],
                "openItems": list(work.open_items) if work else [],
                "openTurn": None if turn_age is None else {"turnId": live.turn_id, "ageS": round(turn_age, 3)},
                "sinceBridgeS": None if silence is None else round(silence, 3),
                "waitingOn": [
                    {"requestId": p.request_id, "kind": p.kind, "ageS": round(now - p.opened, 3)} for p in live.waiting
                ],
                "clients": {"owner": owner.name if owner is not None else None, "connected": len(self.clients)},
                "bridge": None if bridge is None else {"pid": bridge.pid, "state": bridge.state},
                "pendingAcceptedInput": bridge.assembler.pending_input_count(thread_id) if bridge else 0,
                "pendingTurnStart": live.start_pending if bridge else False,
                "bridgeMistakes": self.mistakes.of_thread(thread_id),
                "lastSeq": last_seq,
            }

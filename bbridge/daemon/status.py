"""`daemon/status`: the daemon, its providers, counters, configuration and journal, and a live view of every
thread — its open turn and that turn's age, how long since its bridge last sent anything for it, what it waits
on (pending approvals, questions and tool calls, each with its age), the clients attached, its bridge's pid and
state. A thread's live part is read from its record (`ThreadRegistry.liveness`); a row that names no bridge (no
client constructed the thread, or its provider has no bridge running) shows no turn and no pending start. A hidden
thread (`hidden.py`) has a row only when asked (`include_hidden`), marked with its run and role; the rooms' services
report under their own names; each `[[budgets]]` entry with what is spent against it is under `budgets`."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

import msgspec
import trio

from bbridge.core import native
from bbridge.daemon.agent_settings import AgentSettings
from bbridge.daemon.budgets import Budgets
from bbridge.daemon.config import ConfigReport, ProviderConfig
from bbridge.daemon.counters import DAEMON_INFO, Counters, TurnDurations
from bbridge.daemon.fanout import Fanout
from bbridge.daemon.hidden import HiddenThreads
from bbridge.daemon.idle import blockers, bridge_idle_s
from bbridge.daemon.mistakes import Mistakes
from bbridge.daemon.offered_tools import OfferedTools
from bbridge.daemon.pending import Interactions
from bbridge.daemon.services import Services
from bbridge.daemon.supervisor import Supervisor
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.tracker import Tracker

# The sections the daemon writes itself: a service's report takes none of these names.
SECTIONS: Final = frozenset(
    {
        "daemon",
        "providers",
        "threads",
        "pending",
        "counters",
        "config",
        "journal",
        "turnDurations",
        "hostedTools",
        "agentConfig",
        "budgets",
    }
)


class Status:
    """Reads every part, writes none (but the journal's event count, copied into the counters)."""

    def __init__(
        self,
        providers: dict[str, ProviderConfig],
        config: ConfigReport,
        supervisor: Supervisor,
        fanout: Fanout,
        registry: ThreadRegistry,
        tracker: Tracker,
        interactions: Interactions,
        offered: OfferedTools,
        counters: Counters,
        turn_durations: TurnDurations,
        noted: Mistakes,
        agents: AgentSettings,
        hidden: HiddenThreads,
        services: Services,
        budgets: Budgets | None = None,
    ) -> None:
        self._providers = providers
        self._config = config
        self._supervisor = supervisor
        self._fanout = fanout
        self._journal = fanout.journal
        self._registry = registry
        self._tracker = tracker
        self._interactions = interactions
        self._offered = offered
        self._counters = counters
        self._turn_durations = turn_durations
        self._mistakes = noted
        self._agents = agents
        self._hidden = hidden
        self._services = services
        self._budgets = budgets
        self._started_at = time.time()

    def status(self, include_hidden: bool = False) -> dict[str, Any]:
        now = trio.current_time()
        self._counters.events_out = self._journal.log.recorded
        bridges, clients = self._supervisor.bridges, self._fanout.clients
        providers = []
        for pid in sorted(self._providers):
            bridge = bridges.get(pid)
            entry: dict[str, Any] = {"providerId": pid, **self._supervisor.provider_state(pid)}
            if bridge is not None:
                entry.update(
                    pid=bridge.pid,
                    capabilities=msgspec.to_builtins(bridge.capabilities),
                    uptimeS=round(now - bridge.started_at, 3),
                    threads=len(bridge.threads),
                    idleS=None if (idle := bridge_idle_s(bridge, self._interactions, now)) is None else round(idle, 3),
                )
            providers.append(entry)
        return {
            "daemon": {
                **DAEMON_INFO,
                "uptimeS": round(time.time() - self._started_at, 3),
                "clients": len(clients),
                "clientsByTransport": dict(Counter(client.transport for client in clients)),
                "core": native.describe(),  # compiled (mypyc) or pure, and why
                "hiddenThreads": self._hidden.count(),
            },
            "providers": providers,
            "threads": list(self._thread_status(now, include_hidden)),
            "pending": len(self._interactions.open),
            "counters": msgspec.to_builtins(self._counters),
            "config": msgspec.to_builtins(self._config),
            "journal": self._journal.health(),
            "turnDurations": self._turn_durations.view(),
            "hostedTools": self._offered.status(),
            **({} if (agents := self._agents.report()) is None else {"agentConfig": agents}),
            "budgets": [] if self._budgets is None else self._budgets.status(),
            **self._services.report(),
        }

    def _thread_status(self, now: float, include_hidden: bool) -> Iterable[dict[str, Any]]:
        tracked = self._tracker.threads()
        known = dict(self._journal.threads())
        for thread_id, record in self._registry.records.items():
            if record.pending:
                known.setdefault(thread_id, 0)
        clients = self._fanout.clients
        for thread_id, last_seq in sorted(known.items()):
            hidden = self._registry.hidden_of(thread_id)
            if hidden is not None and not include_hidden:
                continue
            provider_id = self._registry.provider_of(thread_id)
            bridge = self._supervisor.bridges.get(provider_id) if provider_id else None
            work = tracked.get(thread_id)
            live = self._registry.liveness(thread_id, now)
            turn_age, silence = (live.turn_age_s, live.silence_s) if bridge else (None, None)
            owner = self._registry.owner_of(thread_id)
            kept = self._registry.get(thread_id)
            idle_since = None if kept is None else kept.idle_since
            config = self._providers.get(provider_id) if provider_id else None
            yield {
                "threadId": thread_id,
                "providerId": provider_id,
                "providerThreadId": self._registry.provider_threads.get(thread_id),
                "name": self._registry.name_of(thread_id),  # the latest thread/name/updated; null: none this run
                "openTurns": list(work.open_turns) if work else [],
                "openItems": list(work.open_items) if work else [],
                "openTurn": None if turn_age is None else {"turnId": live.turn_id, "ageS": round(turn_age, 3)},
                "sinceBridgeS": None if silence is None else round(silence, 3),
                "waitingOn": [
                    {"requestId": p.request_id, "kind": p.kind, "ageS": round(now - p.opened, 3)} for p in live.waiting
                ],
                "clients": {"owner": owner.name if owner is not None else None, "connected": len(clients)},
                "bridge": None if bridge is None else {"pid": bridge.pid, "state": bridge.state},
                "pendingAcceptedInput": bridge.assembler.pending_input_count(thread_id) if bridge else 0,
                "pendingTurnStart": live.start_pending if bridge else False,
                "bridgeMistakes": self._mistakes.of_thread(thread_id),
                "agentConfig": self._agents.thread_view(thread_id),
                "lastSeq": last_seq,
                "idleS": None if idle_since is None else round(now - idle_since, 3),  # idle reaping (`idle.py`)
                "notReapable": (
                    ["not constructed by a client"]
                    if kept is None
                    else blockers(thread_id, kept, bridge, self._registry, self._tracker, config)
                ),
                **({} if hidden is None else {"hidden": True, "runId": hidden.runId, "role": hidden.role}),
            }

"""The listener's plain HTTP routes: `/healthz`, `/readyz`, `/metrics`, and the page (`/`, `/assets/<name>`).

The page needs no token to load: it holds no data (its data comes over `/rpc`, with the token in `initialize`), and
every page response carries `bbridge.page.HEADERS` (the Content-Security-Policy among them). The probes read the
daemon's own `daemon/status` (the client API's view, `Daemon.status`), never its internals.
`/metrics` is the Prometheus text exposition written by `prometheus_client` from a collector built at each scrape:
gauges for what is (threads, open turns, pending interactions, clients by transport, bridges by state), counters
for what happened (events delivered, refused notifications and tool calls, journal write errors) and a histogram of
turn durations per provider. `bbridge_threads` counts the threads `daemon/status` lists (hidden ones apart:
`bbridge_hidden_threads`); a Perspectives room's runs (its report, `wire.perspectives.PerspectivesStatus`, under
`perspectives`) are counted by outcome, those running a gauge. `bbridge_tokens_total{provider,model,kind}` counts the
usage ledger's booked tokens (`usage/summary` by provider and model, `Daemon.usage_summary`; `model=""`: unknown).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from bbridge import page
from bbridge.daemon.runtime import Daemon
from bbridge.listen.admission import Admission
from bbridge.listen.http import Head

TEXT = "text/plain; charset=utf-8"
NEEDS_TOKEN = "/metrics needs the daemon's token: send Authorization: Bearer <token> (see --token-file)\n"
ASSETS = "/assets/"


def answer(daemon: Daemon, admission: Admission, head: Head) -> tuple[int, bytes | str, str, dict[str, str]]:
    """Status, body, content type and the headers beyond the listener's own for a plain request."""
    if head.method not in ("GET", "HEAD"):
        return 405, f"{head.method} is not served here: the listener answers GET\n", TEXT, {}
    path = head.path
    if path == "/" or path.startswith(ASSETS):
        found = page.asset("index.html" if path == "/" else path[len(ASSETS) :])
        if found is None:
            return 404, f"the page has no asset {path}\n", TEXT, page.HEADERS
        return 200, found[1], found[0], page.HEADERS
    return (*_probe(daemon, admission, head), {})


def _probe(daemon: Daemon, admission: Admission, head: Head) -> tuple[int, bytes | str, str]:
    path = head.path
    if path == "/healthz":
        return 200, "ok\n", TEXT
    if path == "/readyz":
        reason = not_ready(daemon)
        return (503, f"not ready: {reason}\n", TEXT) if reason else (200, "ready\n", TEXT)
    if path == "/metrics":
        if admission.token is not None and admission.bearer(head.header("authorization")) is not True:
            return 401, NEEDS_TOKEN, TEXT
        return 200, metrics(daemon), CONTENT_TYPE_LATEST
    return 404, f"nothing at {path}: the page is at /, the client API is GET /rpc (WebSocket)\n", TEXT


def not_ready(daemon: Daemon) -> str | None:
    """Why the daemon is not ready to serve, or None: it is shutting down, or its journal cannot write."""
    if daemon.shutdown_requested.is_set():
        return "the daemon is shutting down"
    journal = daemon.journal.health()
    if not journal["healthy"]:
        return f"the journal in {journal['dir']} cannot write ({journal['writeErrors']} errors; last: {journal['lastError']})"
    return None


def metrics(daemon: Daemon) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    usage = daemon.usage_summary({"groupBy": ["provider", "model"]})
    registry.register(_Snapshot(daemon.status(), usage["rows"]))
    return generate_latest(registry)


# each token kind's label and its field in a `usage/summary` row
TOKEN_KINDS = (
    ("input", "inputTokens"),
    ("cached_input", "cachedInputTokens"),
    ("output", "outputTokens"),
    ("reasoning_output", "reasoningOutputTokens"),
    ("total", "totalTokens"),
)


class _Snapshot(Collector):
    """One scrape's metrics, from one `daemon/status` result and the usage ledger's rows by provider and model."""

    def __init__(self, status: dict[str, Any], usage: list[dict[str, Any]]) -> None:
        self._status = status
        self._usage = usage

    def collect(self) -> Iterator[Metric]:
        status = self._status
        threads = status["threads"]
        counters = status["counters"]
        yield _gauge(
            "bbridge_threads", "Threads the daemon knows (journaled or live), hidden ones apart.", len(threads)
        )
        yield _gauge(
            "bbridge_hidden_threads", "Threads rooms run for themselves (hidden).", status["daemon"]["hiddenThreads"]
        )
        yield _gauge(
            "bbridge_open_turns", "Turns started and not yet completed.", sum(len(t["openTurns"]) for t in threads)
        )
        yield _gauge("bbridge_pending_interactions", "Approvals, questions and tool calls waiting.", status["pending"])
        clients = GaugeMetricFamily("bbridge_clients", "Connected clients by transport.", labels=["transport"])
        for transport, count in sorted(status["daemon"]["clientsByTransport"].items()):
            clients.add_metric([transport], count)
        yield clients
        bridges = GaugeMetricFamily("bbridge_bridges", "Configured providers by bridge state.", labels=["state"])
        states: dict[str, int] = {}
        for provider in status["providers"]:
            states[provider["state"]] = states.get(provider["state"], 0) + 1
        for state, count in sorted(states.items()):
            bridges.add_metric([state], count)
        yield bridges
        yield _counter("bbridge_events_delivered", "Canonical events delivered (journaled).", counters["events_out"])
        yield _counter(
            "bbridge_notifications_refused", "Bridge notifications refused.", counters["rejected_notifications"]
        )
        yield _counter(
            "bbridge_tool_calls_refused", "Tool calls answered failed at once.", counters["tool_calls_refused"]
        )
        hosted = CounterMetricFamily(
            "bbridge_hosted_tool_calls", "Hosted tool calls the daemon answered, by outcome.", labels=["outcome"]
        )
        failed, cancelled = counters["hosted_calls_failed"], counters["hosted_calls_cancelled"]
        hosted.add_metric(["succeeded"], counters["hosted_calls"] - failed - cancelled)
        hosted.add_metric(["failed"], failed)
        hosted.add_metric(["cancelled"], cancelled)
        yield hosted
        yield _counter("bbridge_hosted_tool_asks", "Approvals hosted tool calls asked for.", counters["hosted_asks"])
        yield _counter("bbridge_journal_write_errors", "Journal writes that failed.", status["journal"]["writeErrors"])
        turns = HistogramMetricFamily(
            "bbridge_turn_duration_seconds", "Turn durations, started to completed, per provider.", labels=["provider"]
        )
        for provider, histogram in sorted(status["turnDurations"].items()):
            buckets = [(_le(bound), float(count)) for bound, count in histogram["buckets"]]
            turns.add_metric([provider], buckets, histogram["sumS"])
        yield turns
        tokens = CounterMetricFamily(
            "bbridge_tokens",
            "Tokens the usage ledger booked, by provider, model and kind.",
            labels=["provider", "model", "kind"],
        )
        for row in self._usage:
            for kind, field in TOKEN_KINDS:
                tokens.add_metric([str(row["provider"]), row["model"] or "", kind], row[field])
        yield tokens
        yield from _perspectives(status.get("perspectives"))


def _perspectives(report: Any) -> Iterator[Metric]:
    """A Perspectives room's runs (`PerspectivesStatus.runs`): those that ended by outcome, those running."""
    runs = report.get("runs") if isinstance(report, dict) else None
    if not isinstance(runs, dict):
        return
    ended = CounterMetricFamily(
        "bbridge_perspectives_runs", "Perspectives runs that ended, by outcome.", labels=["outcome"]
    )
    for outcome, count in sorted(runs.items()):
        if outcome != "running" and isinstance(count, int):
            ended.add_metric([outcome], count)
    yield ended
    yield _gauge("bbridge_perspectives_runs_running", "Perspectives runs in progress.", runs.get("running", 0))


def _le(bound: float | None) -> str:
    return "+Inf" if bound is None else repr(float(bound))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)

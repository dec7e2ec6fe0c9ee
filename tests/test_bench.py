"""`bbridge bench` at tiny sizes: the JSON contract (keys and types), never timings."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from bbridge.bench import stream
from bbridge.bench.core import DECLARED_PARAMS, decode_declared, events_per_1000_tokens
from bbridge.bench.daemon import percentile
from bbridge.core import grammar
from bbridge.wire.delta_decoder import decode_line

TINY = ["--runs", "1", "--turns", "16", "--blasts", "1", "--paced-seconds", "0.05"]
TINY += ["--idle-threads", "20", "--open-threads", "20", "--latency-runs", "2", "--scale-threads", "12"]
TINY += ["--scale-bridges", "2", "--scale-clients", "2", "--scale-seconds", "0.5", "--capacity-steps", "6,12"]
TINY += ["--hosted-calls", "10", "--perspectives-runs", "2"]
TINY += ["--page-events", "0"]  # the page's figure drives Chromium: tests/browser/test_bench_page.py runs it small


def tiny_corpus(root: Path) -> Path:
    """One recorded cell: two threads' synthetic turns on the `bridge→runtime` lane."""
    cell = root / "bench" / "tiny"
    cell.mkdir(parents=True)
    lines = stream.interleaved_lines("t", 2, 2)
    entries = [
        json.dumps({"ts": seq, "run": 1, "seq": seq, "dir": "bridge→runtime", "line": line.decode().rstrip("\n")})
        for seq, line in enumerate(lines)
    ]
    (cell / "bridge→runtime.ndjson").write_text("\n".join(entries) + "\n", encoding="utf-8")
    return root


def number(section: dict[str, Any], key: str) -> float:
    value = section[key]
    assert type(value) in (int, float) and value >= 0, (key, value)
    return float(value)


def test_bench_prints_every_figure_as_json_on_its_last_line(tmp_path: Path) -> None:
    corpus = tiny_corpus(tmp_path / "recordings")
    proc = subprocess.run(
        [sys.executable, "-m", "bbridge", "bench", "--json", "--corpus", str(corpus), *TINY],
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    core, daemon, memory = result["core"], result["daemon"], result["memory"]
    for key in ("deltas_per_s", "decode_only_per_s", "assemble_only_per_s"):
        assert number(core, key) > 0
    assert "ratio_vs_reference" not in core  # the reference is never measured here: shares of the yardstick
    assert core["share_of_decode_only"] == round(core["deltas_per_s"] / core["decode_only_per_s"], 3)
    assert core["assemble_share_of_decode_only"] == round(core["assemble_only_per_s"] / core["decode_only_per_s"], 3)
    # the daemon's share is against the yardstick slices run beside its blasts (the median of its runs)
    assert daemon["share_of_decode_only"] in daemon["share_of_decode_only_runs"]
    assert number(daemon, "yardstick_per_s") > 0
    assert result["core_build"].startswith(("compiled", "pure"))
    assert core["deltas"] == 2 * stream.DELTAS_PER_TURN and core["cells"] == 1
    for key in ("deltas_per_s", "first_delta_p50_ms", "first_delta_p99_ms", "latency_load_deltas_per_s"):
        number(daemon, key)
    assert [load["load_share"] for load in daemon["latency_by_load"]] == [0.1, 0.25, 0.5]
    late = [load["bridge_late_wakes"] for load in daemon["latency_by_load"]]
    assert all(type(n) is int and n >= 0 for n in late) and daemon["latency_bridge_late_wakes"] == late[2]
    assert daemon["grammar_drops"] == 0 and daemon["rejected_notifications"] == 0
    assert daemon["events_per_run"] >= daemon["stream_deltas"] > 16 * stream.DELTAS_PER_TURN
    check_hosted(result["hosted"], 10)
    check_perspectives(result["perspectives"], 2)
    number(memory, "idle_threads_10k_mb")
    number(memory, "open_turns_1k_mb")
    assert type(result["coalescing"]["events_per_1000_tokens"]) is int
    assert result["reference"]["deltas_per_s_readme"] == [170_000, 210_000]
    assert result["reference"]["measured_in_this_run"] is False
    assert (
        len(daemon["first_delta_p99_ms_runs"]) == 2
        and daemon["first_delta_p99_ms_worst"] >= daemon["first_delta_p99_ms"]
    )
    scale = result["scale"]
    assert (scale["threads"], scale["bridges"], scale["clients"]) == (12, 2, 2)
    assert scale["events_lost_runs"] == [0, 0] and scale["events_duplicated_runs"] == [0, 0]
    assert scale["first_delta_samples"] == 2 * 12 * 3  # every client, every thread's three text streams
    assert scale["deltas_in"] == scale["offered_deltas"]
    for key in ("offered_deltas_per_s", "delivered_deltas_per_s", "daemon_cpu_share", "daemon_peak_rss_mb",
                "first_delta_p50_ms", "first_delta_p99_ms", "events_per_s_per_client"):  # fmt: skip
        number(scale, key)
    assert scale["capacity"]["p99_bound_ms"] == 100.0 and [r["threads"] for r in scale["capacity"]["runs"]][:1] == [6]
    assert scale["transport"] == "socket" and scale["relay"] == "daemon"
    check_scale_wire(result["scale_wire"], ("socket", "ws"))
    check_tracing(result["scale_tracing"], "socket", 2)
    assert type(result["scale_wire"]["ws_over_socket_cpu_share"]) is float
    assert set(result["targets"]) == {
        "core_share_of_decode_only", "core_assemble_share_of_decode_only", "daemon_share_of_decode_only",
        "first_delta_p99_under_1ms", "idle_threads_10k_at_most_51mb", "scale_daemon_under_half_a_core",
        "scale_first_delta_p99_under_10ms", "scale_rss_under_300mb", "scale_nothing_lost",
        "scale_daemon_at_most_3x_floor", "scale_ws_at_most_1_3x_socket", "scale_tracing_at_most_1_05x_untraced",
    }  # fmt: skip
    assert all(type(met) is bool for met in result["targets"].values())
    assert result["machine"]["cpus"] >= 1


def check_scale_wire(wire: dict[str, Any], transports: tuple[str, ...]) -> None:
    """Each transport's daemon and floor relay ran, lost nothing, and every client took every first-delta stamp."""
    assert tuple(wire["transports"]) == transports
    for transport in transports:
        figures = wire[transport]
        for relay in ("daemon", "floor"):
            run = figures[relay]
            assert (run["relay"], run["transport"], run["threads"], run["clients"]) == (relay, transport, 12, 2)
            assert run["events_lost_runs"] == run["events_duplicated_runs"] == [0] * len(run["daemon_cpu_s_runs"])
            assert run["first_delta_samples"] == 2 * 12 * 3 and run["deltas_in"] == run["offered_deltas"]
            for key in ("daemon_cpu_share_median", "daemon_cpu_s_median", "first_delta_p99_ms"):
                number(run, key)
        # the floor's clients count every `thread/delta` line it forwarded, as they are
        assert figures["floor"]["events_per_s_per_client"] == figures["floor"]["delivered_deltas_per_s"]
        assert type(figures["daemon_over_floor_cpu_share"]) is float
        assert len(figures["daemon_over_floor_cpu_s_pairs"]) == len(figures["daemon"]["daemon_cpu_s_runs"])


def check_tracing(tracing: dict[str, Any], transport: str, runs: int) -> None:
    """The daemon traced (`[telemetry]`, spans to the bench's receiver) against untraced, over the first transport:
    every traced run exported each turn's span and each bridge's start (12 threads on 2 bridges), lost nothing."""
    assert tracing["transport"] == transport and "OTLP/HTTP" in tracing["exporter"]
    for side in ("on", "off"):
        assert len(tracing[side]["daemon_cpu_s_runs"]) == runs and tracing[side]["events_lost_runs"] == [0] * runs
        for key in ("daemon_cpu_s_median", "daemon_cpu_share_median", "first_delta_p99_ms_median"):
            number(tracing[side], key)
    assert tracing["on"]["spans_exported_runs"] == [12 + 2] * runs
    assert len(tracing["on_over_off_cpu_s_pairs"]) == runs and type(tracing["on_over_off_cpu_s"]) is float


def test_bench_only_scale_runs_the_scale_phase_alone_over_one_transport() -> None:
    sizes = ["--latency-runs", "1", "--scale-threads", "12", "--scale-bridges", "2", "--scale-clients", "2"]
    sizes += ["--scale-seconds", "0.5", "--capacity-steps", ""]
    command = [sys.executable, "-m", "bbridge", "bench", "--json", "--only", "scale", "--scale-transport", "ws"]
    proc = subprocess.run([*command, *sizes], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert "core" not in result and "daemon" not in result and "memory" not in result
    assert result["scale"]["transport"] == "ws" and "capacity" not in result["scale"]
    check_scale_wire(result["scale_wire"], ("ws",))
    check_tracing(result["scale_tracing"], "ws", 1)
    assert "ws_over_socket_cpu_share" not in result["scale_wire"]
    assert "scale_ws_at_most_1_3x_socket" not in result["targets"] and result["targets"]["scale_nothing_lost"]
    assert b"daemon/floor" in proc.stderr and b"traced against" in proc.stderr  # the phase's lines


def check_hosted(hosted: dict[str, Any], calls: int) -> None:
    """Every timed call and spawn counted; a call's own cost is its round trip less its tool's run, so never more."""
    assert hosted["calls"] == hosted["spawns"] == calls and hosted["spawn_tool"] == "true"
    for key in ("first_call_ms", "own_p50_ms", "own_p99_ms", "call_p50_ms", "call_p99_ms", "tool_run_p50_ms",
                "tool_run_p99_ms", "spawn_p50_ms", "spawn_p99_ms"):  # fmt: skip
        number(hosted, key)
    assert hosted["own_p50_ms"] <= hosted["own_p99_ms"] and hosted["spawn_p50_ms"] <= hosted["spawn_p99_ms"]
    assert hosted["own_p50_ms"] <= hosted["call_p50_ms"] and hosted["own_p99_ms"] <= hosted["call_p99_ms"]


def test_bench_only_hosted_times_hosted_tool_calls_through_a_real_tool_host_and_a_trivial_spawn() -> None:
    command = [sys.executable, "-m", "bbridge", "bench", "--json", "--only", "hosted", "--hosted-calls", "12"]
    proc = subprocess.run(command, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert set(result) == {"machine", "hosted"}
    check_hosted(result["hosted"], 12)
    assert b"the daemon's own cost" in proc.stderr  # the phase's line for the terminal


def check_perspectives(figures: dict[str, Any], runs: int) -> None:
    """Every timed run delivered: seven lenses on nine hidden threads (planner, workers, synthesis); the median run
    among the runs, its wall time shared out over its hidden threads."""
    assert (figures["lenses"], figures["hidden_threads"], figures["runs"]) == (7, 9, runs)
    assert len(figures["gather7_s_runs"]) == runs and figures["gather7_s"] in figures["gather7_s_runs"]
    assert figures["gather7_s_worst"] == max(figures["gather7_s_runs"])
    for key in ("per_hidden_thread_ms", "receipt_p50_ms", "cpu_s", "cpu_per_hidden_thread_ms", "planner_s",
                "slowest_worker_s", "synthesis_s"):  # fmt: skip
        number(figures, key)
    assert 0 < figures["receipt_p50_ms"] / 1000 < figures["gather7_s_worst"]  # the receipt comes before the result
    assert abs(figures["per_hidden_thread_ms"] - figures["gather7_s"] * 1000 / 9) < 0.01


def test_bench_only_perspectives_times_seven_lens_panels_on_instant_workers() -> None:
    command = [sys.executable, "-m", "bbridge", "bench", "--json", "--only", "perspectives", "--perspectives-runs", "3"]
    proc = subprocess.run(command, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert set(result) == {"machine", "perspectives"}
    check_perspectives(result["perspectives"], 3)
    assert b"from the tool call to the delivery" in proc.stderr  # the phase's line for the terminal


def test_coalescing_merges_one_token_per_millisecond_into_about_one_event_per_window() -> None:
    assert events_per_1000_tokens(0) == 1000
    assert 9 <= events_per_1000_tokens(100) <= 12


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.99) == 99 and percentile([7], 0.99) == 7


def test_the_yardstick_decodes_the_grammar_with_the_key_part_rule_as_a_msgspec_pattern() -> None:
    """`decode_only` keeps the workload the targets were set against; it must decide exactly as the grammar does."""
    checks = [
        msgspec.json.decode(line, type=_Notification).params
        for line in [*stream.interleaved_lines("y", 2, 2), stream.probe_line("p", 1)]
    ]
    bad = {"kind": "item.open", "key": {"providerItemId": "a\x1fb"}, "item": {"type": "plan", "text": ""}}
    checks.append(msgspec.json.encode({"threadId": "t", "deltas": [bad]}))
    for raw in checks:
        declared = _outcome(decode_declared, raw)
        assert _outcome(grammar.decode_params, raw) == declared
    assert "matching regex" in declared  # the last one, refused by msgspec's own pattern check
    assert msgspec.structs.fields(DECLARED_PARAMS)[1].type != msgspec.structs.fields(grammar.ThreadDeltaParams)[1].type


def test_the_measured_parse_decides_every_line_as_the_grammar_does() -> None:
    """The core phase parses a line as the daemon's connection does (one typed pass, the screen, the fallback):
    the same params as the envelope and `grammar.decode_params`, the same refusal, whichever path a line takes."""
    bad_key = {"kind": "item.open", "key": {"providerItemId": "a\x1fb"}, "item": {"type": "plan", "text": ""}}
    bad_kind = {"kind": "item.nope"}
    fine_escape = {"kind": "item.textDelta", "key": {}, "channel": "plan", "text": "a\x1fb"}  # U+001F in text is fine
    float_usage = {"kind": "contextWindow", "used": 1.0, "size": 2.5, "estimated": False, "attach": "open"}
    opaque_float = {"kind": "extension.state", "extensionKind": "a/b", "payload": {"n": 1.0}}  # `float_hook`
    lines = [*stream.interleaved_lines("y", 2, 2), stream.probe_line("p", 1)]
    for deltas in ([bad_key], [bad_kind], [fine_escape], [float_usage], [opaque_float]):
        note = {"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": "t", "deltas": deltas}}
        lines.append(msgspec.json.encode(note))
    outcomes = []
    for line in lines:
        measured = _outcome(decode_line, line)
        assert measured == _outcome(grammar.decode_params, msgspec.json.decode(line, type=_Notification).params)
        outcomes.append(measured)
    assert [type(outcome) for outcome in outcomes[-5:]] == [str, str, dict, dict, dict]
    assert outcomes[-2]["deltas"][0]["used"] == 1 and type(outcomes[-2]["deltas"][0]["used"]) is int
    assert type(outcomes[-1]["deltas"][0]["payload"]["n"]) is int


def _outcome(decode: Callable[[Any], Any], data: Any) -> Any:
    """What a decoder makes of `data`: its value as builtins, or the message of its refusal."""
    try:
        return msgspec.to_builtins(decode(data))
    except (grammar.GrammarError, msgspec.ValidationError) as exc:
        return str(exc)


class _Notification(msgspec.Struct):
    params: msgspec.Raw

"""The daemon benchmark's bridge: answers the handshake, then writes pre-encoded streams (stdlib only).

`turn/start` whose first input text is `blast TURNS THREADS` writes the
synthetic stream as fast as the pipe takes it; `paced TURNS THREADS RATE`
writes it at RATE deltas per second, one batch per millisecond. Every write
begins with a probe delta stamped with its monotonic send time, and the
phase ends with the probe's done marker (see `bbridge.bench.stream`).
"""

from __future__ import annotations

import sys
import time
from typing import Any, BinaryIO

from bbridge.bench import stream

BLAST_BATCH = 256  # lines per write when nothing paces the stream
PACE_INTERVAL_NS = 1_000_000
# A pacing sleep that returns this much later than asked: the bridge itself was not run in time (the host's
# scheduling). It then writes the missed batches back to back, and that burst queues in the daemon.
LATE_WAKE_NS = 1_000_000


def _write_phase(out: BinaryIO, phase: str, lines: list[bytes], batch: int, interval_ns: int) -> None:
    out.write(stream.probe_open())
    started = time.monotonic_ns()
    deadline = started
    sent, late_wakes = 1, 0
    for start in range(0, len(lines), batch):
        if interval_ns:
            deadline += interval_ns
            pause = deadline - time.monotonic_ns()
            if pause > 0:
                time.sleep(pause / 1e9)
                late_wakes += time.monotonic_ns() - deadline >= LATE_WAKE_NS
        chunk = lines[start : start + batch]
        out.write(stream.probe_line(phase, time.monotonic_ns()) + b"\n".join(chunk) + b"\n")
        out.flush()
        sent += len(chunk) + 1
    out.write(stream.probe_done(phase, sent + 3, started, late_wakes))
    out.flush()


class Streams:
    """Encodes each stream shape once; a phase only swaps its unique id prefix in."""

    def __init__(self) -> None:
        self._templates: dict[tuple[int, int], bytes] = {}

    def lines(self, phase: str, turns: int, threads: int) -> list[bytes]:
        template = self._templates.get((turns, threads))
        if template is None:
            template = b"".join(stream.interleaved_lines(_PLACEHOLDER, threads, turns))
            self._templates[turns, threads] = template
        return template.replace(_PLACEHOLDER.encode(), f"{phase}-".encode()).split(b"\n")[:-1]


_PLACEHOLDER = "~phase~"  # replaced before anything is written (`@` is reserved for the markers)


def _turn(out: BinaryIO, request_id: Any, params: dict[str, Any], phases: int, streams: Streams) -> None:
    words = str(params["input"][0]["text"]).split()
    mode, turns, threads = words[0], int(words[1]), int(words[2])
    phase = f"{mode}{phases}"
    lines = streams.lines(phase, turns, threads)
    out.write(stream.answer(request_id, {}))
    out.flush()
    thread = str(params["threadId"])  # the client's own thread gets a real turn, as the turn-start watchdog expects
    out.write(stream.notification(thread, {"kind": "turn.open"}))
    if mode == "paced":
        batch = max(1, int(words[3]) * PACE_INTERVAL_NS // 1_000_000_000)
        _write_phase(out, phase, lines, batch, PACE_INTERVAL_NS)
    else:
        _write_phase(out, phase, lines, BLAST_BATCH, 0)
    out.write(stream.notification(thread, {"kind": "turn.boundary", "status": "completed"}))
    out.flush()


def main() -> None:
    out = sys.stdout.buffer
    streams = Streams()
    phases = 0
    for raw in sys.stdin.buffer:
        request = stream.request(raw)
        if request is None:
            continue
        method, request_id, params = request
        if method == "turn/start":
            phases += 1
            _turn(out, request_id, params, phases, streams)
        else:
            out.write(stream.plain_answer(method, request_id, params))
            out.flush()


if __name__ == "__main__":
    main()

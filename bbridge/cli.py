"""The `bbridge` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bbridge import parity
from bbridge.events import encode_lines
from bbridge.recording import RecordingError
from bbridge.replay import GOLDEN_ENTROPY, replay_cell


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bbridge", description="The timeline daemon between an IDE and provider bridges.")
    commands = parser.add_subparsers(dest="command", required=True)

    replay = commands.add_parser("replay", help="replay a recorded cell and print its events as NDJSON")
    replay.add_argument("cell", type=Path, metavar="CELL_DIR")
    replay.add_argument("--flush-ms", type=float, default=0, help="text coalescing window (0 disables)")
    replay.add_argument("--entropy-prefix", default=GOLDEN_ENTROPY, help="prefix of minted ids")
    replay.add_argument("--clock", choices=("recorded", "fixed"), default="fixed", help="clock: entry ts or 0")
    replay.add_argument("--unstamped", action="store_true", help="leave threadId/providerThreadId unstamped")
    replay.add_argument("--provider", help="provider id (default: the cell's parent folder name)")

    par = commands.add_parser("parity", help="byte-parity checks against golden outputs")
    kinds = par.add_subparsers(dest="kind", required=True)
    rec = kinds.add_parser("recordings", help="recorded cells against golden/<provider>/<cell>/")
    rec.add_argument("root", type=Path, metavar="ROOT")
    rec.add_argument("--golden", type=Path, required=True, metavar="GOLDEN_ROOT")
    cases = kinds.add_parser("cases", help="synthetic differential cases")
    cases.add_argument("files", type=Path, nargs="+", metavar="FILE")
    cases.add_argument("--first-failure", action="store_true", help="print the first differing step in full")
    return parser


def _replay(args: argparse.Namespace) -> int:
    cell: Path = args.cell
    provider = args.provider or cell.resolve().parent.name
    result = replay_cell(
        cell,
        provider,
        flush_ms=args.flush_ms,
        clock=args.clock,
        entropy_prefix=args.entropy_prefix,
        stamped=not args.unstamped,
    )
    sys.stdout.buffer.write(encode_lines(result.events))
    for reason in result.rejected:
        print(f"bbridge: skipped an invalid thread/delta notification: {reason}", file=sys.stderr)
    return 0


def _parity_recordings(args: argparse.Namespace) -> int:
    passed = failed = 0
    for check in parity.check_recordings(args.root, args.golden):
        print(check.line())
        passed, failed = passed + check.ok, failed + (not check.ok)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def _parity_cases(args: argparse.Namespace) -> int:
    passed = failed = 0
    shown = False
    for path in args.files:
        for case in parity.read_cases(path):
            result = parity.run_case(case)
            if result.ok:
                passed += 1
                continue
            failed += 1
            print(f"FAIL {result.case_id} step {result.step}")
            if args.first_failure and not shown:
                shown = True
                print(f"  expected: {result.expected}\n  got:      {result.got}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "replay":
            return _replay(args)
        if args.kind == "recordings":
            return _parity_recordings(args)
        return _parity_cases(args)
    except (RecordingError, OSError) as exc:
        print(f"bbridge: {exc}", file=sys.stderr)
        return 2

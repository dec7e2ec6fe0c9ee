"""The command line's part for CI (README "Testing your bridge in CI"): recording options (`--record`'s
redactions, the README of a finished recording), blessing cells (`bbridge golden`), and `bbridge parity bridge`
with its JUnit report, GitHub annotations and `--update`."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bbridge.replay import junit, parity
from bbridge.replay.golden import bless
from bbridge.replay.recording import MadeBy, finish
from bbridge.wire.lanes import sanitize_scope
from bbridge.wire.redact import Pattern, default_redactions, user_redactions


def add_golden_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`bbridge golden CELL_DIR... --out GOLDEN_ROOT`."""
    command = commands.add_parser(
        "golden",
        help="bless recorded cells: write their expected events and pinned counts",
        description="Write each cell's goldens with bbridge's own assembler, in the layout of the reference's: "
        "GOLDEN_ROOT/<provider>/<cell>/raw-events.ndjson (coalescing off), raw-events.coalesced.ndjson (100 ms, the "
        "recorded clock), grammar-drops.json, and the cell's {events, unhandled, grammarDrops} in "
        "GOLDEN_ROOT/row-counts.json. <provider> is the cell folder's parent's name. A cell bbridge recorded has its "
        "providerThreadId and providerCheckpointId values numbered by first appearance (da00000000-h1, -h2, ...), "
        "as parity bridge numbers its replay's. Exit status: 0 written, 2 a cell that cannot be read.",
    )
    command.add_argument("cells", type=Path, nargs="+", metavar="CELL_DIR")
    command.add_argument("--out", type=Path, required=True, metavar="GOLDEN_ROOT")


def add_junit_option(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help=f"also write a JUnit XML report to FILE ({what}); with GITHUB_ACTIONS=true each failure is also "
        "printed as an ::error annotation",
    )


def add_redact_options(command: argparse.ArgumentParser) -> None:
    """`--redact` and `--no-default-redactions`: what is replaced in every recorded lane line before it is written."""
    command.add_argument(
        "--redact",
        action="append",
        default=[],
        metavar="REGEX",
        help="with --record: replace what REGEX matches in every recorded string by [redacted:pattern-N] "
        "(repeatable; the README lists the patterns and counts)",
    )
    command.add_argument(
        "--no-default-redactions",
        action="store_true",
        help="with --record: drop the built-ins (home directory, API-key shapes, bearer tokens, secret-named fields)",
    )


def redactions(args: argparse.Namespace) -> list[Pattern]:
    """The patterns a recording is redacted with; ValueError names a pattern that does not compile."""
    return [*([] if args.no_default_redactions else default_redactions()), *user_redactions(args.redact)]


def made_by(providers: dict[str, str], version: str) -> MadeBy:
    """How a recording was made: this command line, each provider's bridge command, the bbridge version."""
    return MadeBy("bbridge " + shlex.join(sys.argv[1:]), providers, version)


def record_options(args: argparse.Namespace) -> list[str]:
    """`bbridge run --record`'s options as its daemon (`bbridge serve`) takes them."""
    options = ["--record", str(args.record.resolve())]
    options += ["--no-default-redactions"] if args.no_default_redactions else []
    return options + [option for regex in args.redact for option in ("--redact", regex)]


def finish_serve(record_dir: Path, commands: dict[str, str], patterns: list[Pattern], version: str) -> None:
    """After `bbridge serve --record`: every cell's README and manifest (`commands`: provider -> bridge command)."""
    finish(record_dir, made_by(commands, version), patterns)


def finish_run(
    args: argparse.Namespace, command: list[str], thread_id: str, patterns: list[Pattern], version: str
) -> None:
    """After `bbridge run --record`: the thread's cell named `--cell`, every cell's README and manifest."""
    names = {sanitize_scope(thread_id): args.cell} if args.cell else {}
    for cell in finish(args.record, made_by({"bridge": shlex.join(command)}, version), patterns, names):
        print(f"bbridge run: recorded {cell}", file=sys.stderr)


def parity_bridge(args: argparse.Namespace) -> int:
    from bbridge import logs
    from bbridge.daemon.config import command_from_string
    from bbridge.replay import bridge_parity

    logs.configure("warning")
    allowlist = args.allowlist or bridge_parity.DEFAULT_ALLOWLIST
    command = command_from_string(args.provider_cmd)
    checks = bridge_parity.check_cells(
        command, args.cells, args.golden, allowlist, dump_dir=args.dump_dir, update=args.update
    )
    passed = failed = updated = skipped = 0
    cases: list[junit.Case] = []
    started, clock = datetime.now(UTC), time.monotonic()
    last = clock
    for check in checks:
        print(check.line(), flush=True)
        skipped += check.skipped
        passed, failed = passed + (check.ok and not check.skipped), failed + (not check.ok)
        updated += check.updated
        now = time.monotonic()
        cases.append(parity_case(check, now - last))
        last = now
    if updated:
        print(f"updated the goldens of {updated} cell(s) in {args.golden}: review the diffs above, then commit them")
    junit.annotate(cases)
    if args.junit is not None:
        junit.write(args.junit, "bbridge parity bridge", cases, time.monotonic() - clock, started)
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


def parity_case(check: parity.Check, seconds: float) -> junit.Case:
    """A cell's check as a JUnit test case: classname `parity.<provider>`, the diff in the failure."""
    name = check.case or check.name
    provider = name.split("/", 1)[0] if check.case else "allowlist"
    if check.skipped:
        return junit.Case(name, f"parity.{provider}", "skipped", check.detail)
    if check.ok:
        return junit.Case(name, f"parity.{provider}", "passed", time=seconds)
    text = "\n\n".join(part for part in (check.detail, check.diff) if part)
    return junit.Case(name, f"parity.{provider}", "failed", check.name, text, seconds)


def golden(args: argparse.Namespace) -> int:
    missing = [cell for cell in args.cells if not cell.is_dir()]
    if missing:
        print(f"bbridge golden: {missing[0]}: not a cell folder (a recording's <provider>/<cell>)", file=sys.stderr)
        return 2
    for blessed in bless(args.cells, args.out):
        counts = ", ".join(f"{k} {v}" for k, v in blessed.counts.items())
        print(f"blessed {blessed.name}: {counts} -> {blessed.folder}")
        for reason in blessed.rejected:
            print(f"  skipped an invalid thread/delta notification: {reason}")
    return 0

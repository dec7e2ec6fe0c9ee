"""`bbridge usage`: what agents spent, from a running daemon's usage ledger (`usage/summary`), as a table or JSON.

A client of the daemon's API like the other operator commands (`bbridge.ops`: `--socket` or `--url`,
`--token-file`). `--by` names the keys to sum by (default `provider,model`), `--since`/`--until` bound when the
turns were booked: a duration back from now (`90s`, `30m`, `24h`, `7d`, `2w`), an ISO 8601 date or time (UTC when
it names no offset) or seconds since the epoch.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any, Final, TextIO

import msgspec

from bbridge import ops
from bbridge.client import Client
from bbridge.wire.usage import USAGE_GROUPS

DEFAULT_BY: Final = "provider,model"
UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
COLUMNS: Final = (
    ("INPUT", "inputTokens"),
    ("CACHED", "cachedInputTokens"),
    ("OUTPUT", "outputTokens"),
    ("REASONING", "reasoningOutputTokens"),
    ("TOTAL", "totalTokens"),
    ("TURNS", "turns"),
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """The `usage` command's parser (its daemon address is added with the other operator commands')."""
    usage: argparse.ArgumentParser = commands.add_parser(
        "usage",
        help="what agents spent: the usage ledger's tokens by provider, model, ... (usage/summary)",
        description="Print the tokens a running daemon's usage ledger booked, summed by --by, with their cost where "
        '[pricing."MODEL"] prices a model. Exit status: 0, 1 the daemon refused (the reason on stderr), 2 usage error.',
    )
    usage.add_argument(
        "--by", default=DEFAULT_BY, metavar="KEYS", help=f"comma-separated keys of {', '.join(USAGE_GROUPS)} "
        f"(default {DEFAULT_BY}); '' for one row of totals",
    )  # fmt: skip
    usage.add_argument("--since", metavar="WHEN", help="turns booked since: 24h, 7d, 30m, an ISO date or time")
    usage.add_argument("--until", metavar="WHEN", help="turns booked before: as --since")
    usage.add_argument("--json", action="store_true", help="the raw answer as one JSON line")
    return usage


def when(text: str, now: float) -> float:
    """A `--since`/`--until` value as seconds since the epoch; `ValueError` saying what is accepted."""
    if match := re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip()):
        return now - float(match[1]) * UNITS[match[2]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r}: expected a duration back from now (30m, 24h, 7d, 2w) or an ISO date") from None
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).timestamp()


def main(args: argparse.Namespace, where: ops.Where, token: str | None, out: TextIO = sys.stdout) -> int:
    keys = [key.strip() for key in args.by.split(",") if key.strip()]
    unknown = [key for key in keys if key not in USAGE_GROUPS]
    if unknown:
        print(f"bbridge usage: --by {', '.join(unknown)}: expected keys of {', '.join(USAGE_GROUPS)}", file=sys.stderr)
        return 2
    params: dict[str, Any] = {"groupBy": keys}
    now = time.time()
    try:
        for name in ("since", "until"):
            if getattr(args, name) is not None:
                params[name] = when(getattr(args, name), now)
    except ValueError as exc:
        print(f"bbridge usage: --{name} {exc}", file=sys.stderr)
        return 2

    async def show(client: Client) -> None:
        summary = await client.request("usage/summary", params)
        if args.json:
            out.write(msgspec.json.encode(summary).decode() + "\n")
        else:
            out.write("".join(f"{line}\n" for line in table(keys, summary.get("rows") or [])))

    return ops._run("usage", lambda: ops._session(where, token, show))


def table(keys: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The rows as aligned columns (keys left, numbers right), a total line under more than one."""
    if not rows or all(not row.get("turns") and not row.get("totalTokens") for row in rows):
        return ["no usage booked"]
    priced = any("usd" in row for row in rows)
    head = [key.upper() for key in keys] + [name for name, _ in COLUMNS] + (["USD"] if priced else [])
    lines = [[*(_key(row.get(key)) for key in keys), *_amounts(row, priced)] for row in rows]
    if len(rows) > 1:
        total = {field: sum(row.get(field, 0) for row in rows) for _, field in COLUMNS}
        if priced:
            total["usd"] = sum(row.get("usd", 0.0) for row in rows)
        label = ["total", *([""] * (len(keys) - 1))] if keys else []
        lines.append([*label, *_amounts(total, priced)])
    widths = [max(len(cell) for cell in column) for column in zip(head, *lines, strict=True)]
    numeric = len(keys)

    def aligned(cells: list[str]) -> str:
        parts = [
            cell.ljust(w) if i < numeric else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [aligned(head), *(aligned(line) for line in lines)]


def _key(value: Any) -> str:
    return "-" if value is None else str(value)


def _amounts(row: dict[str, Any], priced: bool) -> list[str]:
    cells = [str(row.get(field, 0)) for _, field in COLUMNS]
    if priced:
        cells.append(f"{row['usd']:.4f}" if "usd" in row else "-")
    return cells

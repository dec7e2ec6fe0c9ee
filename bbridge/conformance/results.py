"""Rule results and their text rendering (the `bbridge conformance` output)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Status = Literal["PASS", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Result:
    rule: str
    status: Status
    reason: str

    def line(self) -> str:
        return f"{self.status} {self.rule} — {self.reason}"


def passed(rule: str, reason: str) -> Result:
    return Result(rule, "PASS", reason)


def failed(rule: str, reason: str) -> Result:
    return Result(rule, "FAIL", reason)


def skipped(rule: str, reason: str) -> Result:
    return Result(rule, "SKIP", reason)


def summary(results: Iterable[Result]) -> tuple[int, int]:
    """(passed, failed); skips are not counted."""
    statuses = [r.status for r in results]
    return statuses.count("PASS"), statuses.count("FAIL")

"""Rule results and their text rendering (the `bbridge conformance` output)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from bbridge.replay import junit

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


OUTCOMES: dict[Status, junit.Outcome] = {"PASS": "passed", "FAIL": "failed", "SKIP": "skipped"}


def junit_case(result: Result) -> junit.Case:
    """A rule as a JUnit test case: classname `conformance.<rule's first segment>`; the rules run concurrently, so
    a case has no time of its own (the suite's is the run's)."""
    classname = f"conformance.{result.rule.split('/', 1)[0]}"
    outcome = OUTCOMES[result.status]
    if outcome == "passed":
        return junit.Case(result.rule, classname, outcome)
    return junit.Case(result.rule, classname, outcome, result.reason.partition("\n")[0], result.reason)

"""Results for CI systems: a JUnit XML report (`--junit FILE`) and GitHub Actions annotations.

`bbridge parity bridge` writes one test case per cell, `bbridge conformance` one per rule, each command run one
`<testsuite>` (tests, failures, errors, skipped and time counted) inside `<testsuites>` — the shape Jenkins'
junit-10.xsd, GitLab, GitHub's test-report actions and most others read. A failure's `message` is its one-line
summary and its text the diff or the reason. Text that XML 1.0 cannot carry (control characters a bridge's
output may hold) is written as `\\xNN`.

With `GITHUB_ACTIONS=true` each failure is also printed as a workflow command, `::error title=…::…`, so the run's
page shows it; `%`, CR and LF (and `:` and `,` in the title) are escaped as the runner requires.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TextIO

Outcome = Literal["passed", "failed", "error", "skipped"]
# XML 1.0's Char production, less what it allows: C0 controls other than TAB, LF, CR; surrogates; U+FFFE/U+FFFF
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Case:
    """One test case: a cell or a rule."""

    name: str
    classname: str
    outcome: Outcome
    message: str = ""  # one line: the failure's or skip's summary
    text: str = ""  # the diff or the reason, in full
    time: float | None = None  # seconds; None when it ran concurrently with others and has no own time


def _clean(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def report(suite: str, cases: Sequence[Case], time: float, started: datetime | None = None) -> bytes:
    """The JUnit XML document of one command run."""
    counts = {k: sum(c.outcome == k for c in cases) for k in ("failed", "error", "skipped")}
    total = {"tests": str(len(cases)), "failures": str(counts["failed"]), "errors": str(counts["error"])}
    root = ET.Element("testsuites", {"name": suite, **total, "time": f"{time:.3f}"})
    stamp = (started or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S")
    attributes = {"name": suite, **total, "skipped": str(counts["skipped"]), "time": f"{time:.3f}"}
    element = ET.SubElement(root, "testsuite", {**attributes, "timestamp": stamp, "hostname": socket.gethostname()})
    for case in cases:
        node = ET.SubElement(element, "testcase", {"name": _clean(case.name), "classname": _clean(case.classname)})
        if case.time is not None:
            node.set("time", f"{case.time:.3f}")
        if case.outcome != "passed":
            tag = {"failed": "failure", "error": "error", "skipped": "skipped"}[case.outcome]
            child = ET.SubElement(node, tag, {"message": _clean(case.message)})
            if case.outcome != "skipped":
                child.set("type", tag)
            child.text = _clean(case.text) or None
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def write(path: Path, suite: str, cases: Sequence[Case], time: float, started: datetime | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(report(suite, cases, time, started))


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


ANNOTATION_CHARS = 4000  # GitHub shows a few kB of an annotation; the JUnit file has it all


def annotation(case: Case) -> str:
    """`::error title=<classname: name>::<message, then the text>` with GitHub's escapes."""
    body = "\n".join(part for part in dict.fromkeys((case.message, case.text)) if part)  # the text once
    if len(body) > ANNOTATION_CHARS:
        body = body[:ANNOTATION_CHARS] + "\n… (the rest is in the JUnit report)"
    return f"::error title={_escape_property(f'{case.classname}: {case.name}')}::{_escape_data(body)}"


def annotate(cases: Sequence[Case], out: TextIO = sys.stdout, env: Mapping[str, str] = os.environ) -> None:
    """On GitHub Actions, one `::error` line per failed or errored case."""
    if env.get("GITHUB_ACTIONS") != "true":
        return
    for case in cases:
        if case.outcome in ("failed", "error"):
            out.write(annotation(case) + "\n")
    out.flush()

"""JUnit reports and GitHub annotations (issue 37, step 3): `--junit FILE` on `parity bridge` and `conformance`,
validated against Jenkins' junit-10.xsd (tests/junit_support.py: from pytest's sdist, `make junit-schema`), and `::error` lines with
GitHub's escapes when GITHUB_ACTIONS=true."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from lxml import etree

from bbridge.replay import junit
from tests.junit_support import assert_valid

CONFORMANCE_BRIDGE = Path(__file__).parent / "fakes" / "conformance_bridge.py"


def validated(document: bytes) -> etree._Element:
    """The report's root, after asserting it is what the schema allows."""
    root = etree.fromstring(document)
    assert_valid(root)
    return root


def test_a_report_validates_and_counts_each_outcome() -> None:
    cases = [
        junit.Case("bridge/ok", "parity.bridge", "passed", time=0.5),
        junit.Case("bridge/bad", "parity.bridge", "failed", "bridge/bad: 3 events", 'diff <&"> \x00\x1b[31m', 1.25),
        junit.Case("rule/x", "conformance.rule", "skipped", "not applicable"),
        junit.Case("rule/y", "conformance.rule", "error", "crashed", "trace"),
    ]
    root = validated(junit.report("bbridge parity bridge", cases, 2.0))
    [suite] = root.findall("testsuite")
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "4", "failures": "1", "errors": "1", "skipped": "1", "time": "2.000"
    }  # fmt: skip
    failure = suite.find("testcase[@name='bridge/bad']/failure")
    assert failure is not None and failure.get("message") == "bridge/bad: 3 events"
    assert failure.text == 'diff <&"> \\x00\\x1b[31m'  # control characters XML cannot carry, written as \xNN
    assert suite.find("testcase[@name='bridge/ok']/failure") is None
    assert suite.find("testcase[@name='rule/x']/skipped") is not None


def test_annotations_escape_what_github_requires_and_only_on_github() -> None:
    case = junit.Case("a/b", "parity.a", "failed", "100% off\r\nline two", "x: y, z")
    assert junit.annotation(case) == "::error title=parity.a%3A a/b::100%25 off%0D%0Aline two%0Ax: y, z"
    out = io.StringIO()
    junit.annotate([case, junit.Case("c", "k", "passed")], out, {"GITHUB_ACTIONS": "true"})
    assert out.getvalue().splitlines() == [junit.annotation(case)]
    elsewhere = io.StringIO()
    junit.annotate([case], elsewhere, {})
    assert elsewhere.getvalue() == ""


def test_conformance_writes_one_case_per_rule_and_annotates_failures(tmp_path: Path) -> None:
    report = tmp_path / "reports" / "conformance.xml"
    done = subprocess.run(
        [sys.executable, "-m", "bbridge", "conformance", "--junit", str(report), "--wait-ms", "2000",
         "--", sys.executable, str(CONFORMANCE_BRIDGE), "drop-unknown"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "GITHUB_ACTIONS": "true"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the documented exit status: a rule failed
    results = [line.split(" ", 2) for line in done.stdout.splitlines() if line[:5] in ("PASS ", "FAIL ", "SKIP ")]
    [suite] = validated(report.read_bytes()).findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [rule for _, rule, _ in results]
    failed = [rule for status, rule, _ in results if status == "FAIL"]
    assert "rpc/unknown-method" in failed
    assert suite.get("failures") == str(len(failed))
    assert suite.get("skipped") == str(sum(status == "SKIP" for status, _, _ in results))
    failure = suite.find("testcase[@name='rpc/unknown-method']/failure")
    assert failure is not None and failure.text and "silently dropped" in failure.text
    assert [
        line
        for line in done.stdout.splitlines()
        if line.startswith("::error title=conformance.rpc%3A rpc/unknown-method::")
    ]

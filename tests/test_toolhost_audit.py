"""`[tool_audit]` (bbridge.toolhost.audit): one line per call without argument values, and redaction."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import trio

from bbridge.daemon.config import Refusal
from bbridge.seams.tool_host import Approval, HostedCall
from bbridge.toolhost.audit import Audit, Redactor, digest, load_audit, shape
from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.declarations import HostedTool
from bbridge.toolhost.host import Host
from bbridge.toolhost.policy import compile_pattern

SECRET = "sk-live-0123456789"


async def _allow(details: dict[str, Any]) -> Approval:
    return Approval("allow_once", "client-1")


def _tool(script: str) -> HostedTool:
    return HostedTool(
        name="echo_q", source="test", description="d", command=[sys.executable, "-c", script, "{q}"], policy="ask"
    )


def _call(tmp_path: Path, **arguments: Any) -> HostedCall:
    return HostedCall("thr-1", "echo", "turn-1", "call-1", "echo_q", arguments, str(tmp_path), _allow)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_one_line_per_call_with_the_fields_and_no_argument_value(tmp_path: Path) -> None:
    path = tmp_path / "audit.ndjson"
    audit = Audit(path, Redactor((compile_pattern(r"sk-live-\w+"),)))
    host = Host(Catalog([_tool("import sys; print('got', sys.argv[1])")], [], [], []), audit=audit)
    arguments = {"q": SECRET, "n": 3, "tags": ["a", "b"], "opt": {"deep": True}}
    result = await host.call(_call(tmp_path, **arguments))
    host.close()
    assert result == {"success": True, "contentItems": [{"type": "inputText", "text": "got [redacted]\n"}]}
    [line] = _lines(path)
    assert SECRET not in path.read_text() and '"3"' not in path.read_text()
    assert line["thread"] == "thr-1" and line["tool"] == "echo_q" and line["call"] == "call-1"
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
    assert line["argsSha256"] == hashlib.sha256(canonical).hexdigest()
    assert line["argsShape"] == {"n": "number", "opt": {"deep": "boolean"}, "q": "string", "tags": ["string"]}
    assert (line["decision"], line["decidedBy"]) == ("ask: allow_once", "client-1")
    assert (line["status"], line["exit"], line["attempts"]) == ("ok", 0, 1)
    assert line["bytesOut"] == len(f"got {SECRET}\n")
    assert line["durationMs"] >= 0 and line["time"].endswith("+00:00")


async def test_a_cancelled_call_is_audited_too(tmp_path: Path) -> None:
    path = tmp_path / "audit.ndjson"
    host = Host(Catalog([_tool("import time; time.sleep(30)")], [], [], []), audit=Audit(path))
    with trio.move_on_after(0.5):
        await host.call(_call(tmp_path, q="x"))
    host.close()
    [line] = _lines(path)
    assert line["status"] == "cancelled"


def test_the_default_path_is_beside_the_journal_else_none(tmp_path: Path) -> None:
    assert load_audit(None, tmp_path)[0].path == tmp_path / "tool-audit.ndjson"
    assert load_audit(None, None)[0].path is None
    audit, refused = load_audit({"path": str(tmp_path / "x.ndjson"), "redact": ["ok", "(a+)+"]}, None)
    assert audit.path == tmp_path / "x.ndjson"
    assert [pattern.pattern for pattern in audit.redactor.patterns] == ["ok"]
    assert [(r.section, r.key) for r in refused] == [("tool_audit", "redact[1]")]
    assert load_audit({"paht": "x"}, None)[1] == [Refusal("tool_audit", None, "Object contains unknown field `paht`")]


def test_redaction_leaves_images_and_applies_every_pattern() -> None:
    redactor = Redactor((compile_pattern("one"), compile_pattern("two")))
    image = {"type": "inputImage", "imageUrl": "data:image/png;base64,b25l"}
    result = {"success": True, "contentItems": [{"type": "inputText", "text": "one two three"}, image]}
    assert redactor.result(result)["contentItems"] == [
        {"type": "inputText", "text": "[redacted] [redacted] three"},
        image,
    ]


def test_digest_and_shape_never_depend_on_key_order() -> None:
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert shape([1, "x", 2, None]) == ["number", "string", "null"]

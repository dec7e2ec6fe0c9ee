"""The Claude Code translator's tool classification (spec §4.5.1–4.5.3): every tool shape, label and title,
edits and their fallbacks, delegations, result texts.
"""

from __future__ import annotations

from typing import Any

import pytest

from bbridge.core import grammar as g
from bridges.claude_code import tool_items
from tests.claude_messages import out

# -- tool classification (§4.5.1–4.5.3) ------------------------------------------------


def shape(name: str, tool_input: Any) -> dict[str, Any]:
    classified = tool_items.classify(name, "toolu_1", tool_input)
    delta = g.ItemOpen(
        key=g.ItemKey(providerItemId="toolu_1"), item=classified.item, presentation=classified.presentation
    )
    return out([delta])[0]


@pytest.mark.parametrize(
    ("name", "tool_input", "item", "label", "title"),
    [
        ("Read", {"file_path": "/a/b.py"}, {"type": "fileRead", "path": "/a/b.py"}, "Reading file", "b.py"),
        ("Grep", {"pattern": "foo", "path": "src"}, {"type": "search", "mode": "content", "query": "foo", "path": "src"}, "Searching files", "foo"),
        ("Glob", {"pattern": "*.py", "path": ""}, {"type": "search", "mode": "path", "query": "*.py"}, "Finding files", "*.py"),
        ("Bash", {"command": "sleep 9", "run_in_background": True}, {"type": "command", "command": "sleep 9", "cwd": ""}, "Starting background command", "sleep 9"),
        ("WebSearch", {"query": "q"}, {"type": "webSearch", "queries": ["q"]}, "Searching the web", "q"),
        ("WebFetch", {"url": "https://x"}, {"type": "webFetch", "url": "https://x", "prompt": None, "pattern": None}, "Fetching page", "https://x"),
        ("mcp__bb-bridge__ask", {"q": 1}, {"type": "tool", "tool": "ask", "server": "bb", "args": {"q": 1}}, "Running ask", None),
        ("mcp__github__list__prs", [1], {"type": "tool", "tool": "list__prs", "server": "github"}, "Running list__prs", "github"),
        ("Bash", {"command": ""}, {"type": "tool", "tool": "Bash", "args": {"command": ""}}, "Running Bash", None),
        ("Frobnicate", "x", {"type": "tool", "tool": "Frobnicate"}, "Running Frobnicate", None),
    ],
)  # fmt: skip
def test_tool_shapes(name: str, tool_input: Any, item: dict[str, Any], label: str, title: str | None) -> None:
    opened = shape(name, tool_input)
    assert opened["item"] == item
    assert opened["presentation"]["label"]["pending"] == label
    assert opened["presentation"].get("title") == title


def test_edit_write_and_their_fallbacks() -> None:
    edit = shape("Edit", {"file_path": "/w/a.js", "old_string": "a", "new_string": "b"})
    assert edit["item"] == {
        "type": "fileChange",
        "changes": [{"path": "/w/a.js", "kind": "update", "oldText": "a", "newText": "b"}],
    }
    assert edit["presentation"]["title"] == "a.js"
    write = shape("Write", {"file_path": "/w/n.txt", "content": "x"})
    assert write["item"]["changes"] == [{"path": "/w/n.txt", "kind": "add", "newText": "x"}]
    assert write["presentation"]["label"] == {"pending": "Writing file", "completed": "Wrote file"}
    pathless = shape("Edit", {"old_string": "a"})
    assert pathless["item"] == {"type": "tool", "tool": "Edit", "args": {"old_string": "a"}}
    assert "title" not in pathless["presentation"] and pathless["presentation"]["icon"] == {"glyph": "EditFile"}
    assert shape("Edit", {"file_path": 3})["presentation"]["label"]["pending"] == "Running Edit"


def test_multi_edit_and_notebook_edit() -> None:
    multi = shape("MultiEdit", {"file_path": "a", "edits": [{"old_string": "1", "new_string": "2"}] * 2})
    assert len(multi["item"]["changes"]) == 2
    broken = shape("MultiEdit", {"file_path": "a", "edits": "no", "old_string": "x"})
    assert broken["item"]["changes"] == [{"path": "a", "kind": "update", "oldText": "x"}]
    notebook = shape("NotebookEdit", {"notebook_path": "/n.ipynb", "new_source": "print()"})
    assert notebook["item"]["changes"] == [{"path": "/n.ipynb", "kind": "update", "newText": "print()"}]
    assert notebook["presentation"]["label"]["pending"] == "Editing notebook"


def test_delegation_label_and_detail() -> None:
    opened = shape(
        "Task", {"prompt": "  first line\nsecond", "subagent_type": "Plan", "model": "opus", "run_in_background": True}
    )
    assert opened["item"] == {"type": "delegation", "childRef": "toolu_1", "label": "first line", "background": True}
    assert opened["presentation"]["label"]["pending"] == "Launching subagent"
    assert opened["presentation"]["detail"] == "Plan agent · model opus"


def test_result_text_extractor() -> None:
    assert (
        tool_items.result_text(
            [{"type": "tool_reference", "tool_name": "A"}, {"type": "tool_reference", "tool_name": "B"}]
        )
        == "Matched tools: A, B"
    )
    assert (
        tool_items.result_text([{"type": "text", "text": "a"}, {"type": "image", "path": "/p"}, {"type": "x"}, 3])
        == "a\n[image: /p]\n[x]"
    )
    assert tool_items.result_text({"content": [{"type": "text", "text": "t"}]}) == "t"
    assert tool_items.result_text({"a": "é/"}) == '{"a":"é/"}'
    assert tool_items.result_text(True) == "true"


def test_command_output_prefers_the_blocks_structured_result() -> None:
    assert tool_items.command_output("text", {"stdout": "out", "stderr": "err"}) == "out\nerr"
    assert tool_items.command_output("text", {"stdout": "out\n", "stderr": "err"}) == "out\nerr"
    assert tool_items.command_output("text", {"stdout": "", "stderr": ""}) == "text"
    assert tool_items.command_output(" (Bash completed with no output) ", None) is None
    assert tool_items.command_output("c", "(Bash completed with no output)") == "c"


def test_stripped_summary_drops_bookkeeping_lines() -> None:
    assert tool_items.stripped_summary("answer  \nagentId: a1\n<usage>x</usage>\n") == "answer"

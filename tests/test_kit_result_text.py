"""The kit's tool-result text (`bbridge.kit.result_text`) as each bridge states it: the shared reading, and each rule
where the references differ."""

from __future__ import annotations

from bridges.acp.messages import result_text as ACP
from bridges.claude_code.tool_items import result_text as CLAUDE
from bridges.pi.translate import result_text as PI


def test_every_reference_reads_values_alike() -> None:
    for read in (CLAUDE, PI, ACP):
        assert [read(None), read("s"), read(2.0), read(False), read({"a": 1})] == ["", "s", "2", "false", '{"a":1}']
        assert read({"content": [{"type": "text", "text": "t"}, {"type": "image", "url": "u"}, 3]}) == "t\n[image: u]"
        assert read({"content": "x"}) == '{"content":"x"}'
        assert read(
            [{"type": "tool_reference", "tool_name": "Grep"}, {"type": "tool_reference", "tool_name": "G"}]
        ) == ("Matched tools: Grep, G")


def test_pi_takes_any_tool_name_member() -> None:
    blocks = [{"type": "tool_reference", "tool_name": ""}]
    assert PI(blocks) == "Matched tools: "
    assert CLAUDE(blocks) == ACP(blocks) == "[tool_reference]"


def test_pi_labels_with_a_blank_string() -> None:
    blocks = [{"type": "doc", "path": "", "url": "u"}]
    assert PI(blocks) == "[doc: ]"
    assert CLAUDE(blocks) == ACP(blocks) == "[doc: u]"


def test_acp_skips_a_blank_type() -> None:
    blocks = [{"type": ""}, {"type": "text", "text": "t"}]
    assert ACP(blocks) == "t"
    assert CLAUDE(blocks) == PI(blocks) == "[]\nt"

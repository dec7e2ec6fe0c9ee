"""Codex request parameters (spec §2.5) against every recorded `bridge→provider` request, and the
standalone `/compact` detection (§2.6.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bbridge import kit
from bbridge.core import js
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, RUNTIME_TO_BRIDGE, read_cell
from bridges.codex import params

ROOT = Path(__file__).resolve().parents[2] / "shared" / "recordings" / "codex"
CELLS = (
    sorted(path.name for path in ROOT.iterdir() if (path / "bridge→provider.ndjson").exists()) if ROOT.exists() else []
)
CONSTRUCTION = ("thread/start", "thread/resume", "thread/fork")


def pairs(cell: Path) -> list[tuple[str, str]]:
    """(built, recorded) JSON text for each construction and turn request the bridge wrote to codex."""
    found: list[tuple[str, str]] = []
    asked: dict[str, Any] | None = None
    for entry in read_cell(cell):
        message = js.parse(entry.line)
        method = message.get("method")
        if entry.dir == RUNTIME_TO_BRIDGE and method in (*CONSTRUCTION, "turn/start"):
            asked = message
        elif (
            entry.dir == BRIDGE_TO_PROVIDER
            and asked is not None
            and method in (*CONSTRUCTION, "turn/start", "thread/compact/start")
        ):
            sent = message["params"]
            if method in CONSTRUCTION:
                built = params.construction(method, asked["params"])
            elif method == "turn/start":
                built = params.turn(sent["threadId"], asked["params"])
            else:
                assert kit.is_standalone_compact(asked["params"]["input"])
                built = {"threadId": sent["threadId"]}
            found.append((js.stringify(built), js.stringify(unredacted(sent, asked["params"]))))
            asked = None
    return found


def unredacted(sent: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """The request without the environment variables the recorder removed from the runtime lane."""
    config = sent.get("config")
    if not isinstance(config, dict):
        return sent
    known = {"BB_THREAD_ID", *asked.get("options", {}).get("envVars", {})}
    prefix = "shell_environment_policy.set."
    kept = {key: value for key, value in config.items() if not key.startswith(prefix) or key[len(prefix) :] in known}
    return {**sent, "config": kept}


@pytest.mark.parametrize("cell", CELLS)
def test_requests_match_the_recording(cell: str) -> None:
    for built, sent in pairs(ROOT / cell):
        assert built == sent


def test_every_cell_exercises_a_request() -> None:
    assert sum(len(pairs(ROOT / cell)) for cell in CELLS) > 20


def test_permission_mapping_and_config() -> None:
    auto = params.permissions({"permissionScope": "workspace", "approvalReviewer": "automatic"})
    assert (auto.approval_policy, auto.reviewer) == ("on-request", "auto_review")
    assert (
        params.permissions(
            {"permissionScope": "workspace", "approvalReviewer": "user", "permissionEscalation": "deny"}
        ).approval_policy
        == "never"
    )
    options = {
        "reasoningLevel": "high",
        "envVars": {"A": "1", "bad-name": "x", "BB_THREAD_ID": "mine", "B": "2"},
        "providerOptions": {"envUnset": ["B", "C"], "providerSubagentsEnabled": False, "memoryEnabled": False},
    }
    extra = params.provider_options(options)
    assert params.config("thr", options, extra, ["/r"]) == {
        "shell_environment_policy.set.BB_THREAD_ID": "mine",
        "shell_environment_policy.set.A": "1",
        "shell_environment_policy.unset.B": "1",
        "shell_environment_policy.unset.C": "1",
        "model_reasoning_effort": "high",
        "features.default_mode_request_user_input": False,
        "features.multi_agent": False,
        "features.multi_agent_v2.max_concurrent_threads_per_session": 1,
        "memories.use_memories": False,
        "memories.generate_memories": False,
        "sandbox_workspace_write.writable_roots": ["/r"],
    }
    with pytest.raises(params.ParamsError, match=r"Codex does not support the none reasoning level\."):
        params.config("thr", {"reasoningLevel": "none"}, extra, [])
    with pytest.raises(params.ParamsError):
        params.provider_options({"providerOptions": {"memoryEnabled": "yes"}})


def test_fork_checkpoints_drop_the_legacy_prefix_and_inputs_map() -> None:
    fork = params.construction(
        "thread/fork",
        {
            "threadId": "thr",
            "cwd": "/w",
            "sourceProviderThreadId": "src",
            "sourceProviderCheckpointId": "bt0123abcd-12-turn",
            "options": {"serviceTier": "fast"},
        },
    )
    assert (
        list(fork)[:2] == ["threadId", "lastTurnId"] and fork["lastTurnId"] == "turn" and fork["serviceTier"] == "fast"
    )
    assert params.user_input({"type": "localFile", "path": "/a"}) == {
        "type": "text",
        "text": "[Attached file: /a]",
        "text_elements": [],
    }
    assert params.user_input({"type": "image", "url": "u"}) == {"type": "image", "url": "u"}


def compact(text: str, start: int = 0, **resource: Any) -> list[dict[str, Any]]:
    shown = {"kind": "command", "trigger": "/", "name": "compact", "source": "command", "origin": "builtin", **resource}
    return [{"type": "text", "text": text, "mentions": [{"start": start, "end": start + 8, "resource": shown}]}]


def test_standalone_compact() -> None:
    assert kit.is_standalone_compact(compact("/compact"))
    assert kit.is_standalone_compact(compact(" 😀"[:1] + "/compact  ", start=1))
    assert not kit.is_standalone_compact(compact("/compact now"))
    assert not kit.is_standalone_compact(compact("/compact", origin="user"))
    assert not kit.is_standalone_compact([*compact("/compact"), {"type": "image", "url": "u"}])
    assert not kit.is_standalone_compact([{"type": "text", "text": "/compact", "mentions": []}])

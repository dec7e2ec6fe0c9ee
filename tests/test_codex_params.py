"""Codex request parameters (spec §2.5) against every recorded `bridge→provider` request, and the
standalone `/compact` detection (§2.6.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge import kit
from bbridge.core import js
from bbridge.wire import protocol
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, RUNTIME_TO_BRIDGE, read_cell
from bridges.codex import codex_params
from tests.conftest import require_shared, shared_path

ROOT = shared_path("recordings", "codex") or Path("absent")
CELLS = (
    sorted(path.name for path in ROOT.iterdir() if (path / "bridge→provider.ndjson").exists()) if ROOT.exists() else []
)
CONSTRUCTION = ("thread/start", "thread/resume", "thread/fork")
TYPES: dict[str, type[Any]] = {
    "thread/start": protocol.ThreadStartParams,
    "thread/resume": protocol.ThreadResumeParams,
    "thread/fork": protocol.ThreadForkParams,
    "turn/start": protocol.TurnStartParams,
}


def typed(method: str, line: str) -> Any:
    """The request's params as the kit decodes them (once, into the protocol type)."""
    return msgspec.convert(msgspec.json.decode(line)["params"], TYPES[method])


def options(**given: Any) -> protocol.ExecutionOptions:
    scope = {"permissionMode": "accept-edits", "permissionScope": "workspace", "approvalReviewer": "user"}
    decoded: protocol.ExecutionOptions = msgspec.convert(
        {**scope, "permissionEscalation": "ask", **given}, protocol.ExecutionOptions
    )
    return decoded


def pairs(cell: Path) -> list[tuple[str, str]]:
    """(built, recorded) JSON text for each construction and turn request the bridge wrote to codex."""
    found: list[tuple[str, str]] = []
    asked: dict[str, Any] | None = None
    asked_line = ""
    for entry in read_cell(cell):
        message = js.parse(entry.line)
        method = message.get("method")
        if entry.dir == RUNTIME_TO_BRIDGE and method in (*CONSTRUCTION, "turn/start"):
            asked, asked_line = message, entry.line
        elif (
            entry.dir == BRIDGE_TO_PROVIDER
            and asked is not None
            and method in (*CONSTRUCTION, "turn/start", "thread/compact/start")
        ):
            sent = message["params"]
            if method in CONSTRUCTION:
                built = codex_params.construction(typed(method, asked_line))
            elif method == "turn/start":
                built = codex_params.turn(sent["threadId"], typed(method, asked_line))
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
    require_shared("recordings", "codex")  # without the recordings there is nothing to count: skipped, saying why
    assert sum(len(pairs(ROOT / cell)) for cell in CELLS) > 20


def test_permission_mapping_and_config() -> None:
    auto = codex_params.permissions(options(permissionMode="auto", approvalReviewer="automatic"))
    assert (auto.approval_policy, auto.reviewer) == ("on-request", "auto_review")
    assert codex_params.permissions(options(permissionEscalation="deny")).approval_policy == "never"
    given = options(
        reasoningLevel="high",
        envVars={"A": "1", "bad-name": "x", "BB_THREAD_ID": "mine", "B": "2"},
        providerOptions={"envUnset": ["B", "C"], "providerSubagentsEnabled": False, "memoryEnabled": False},
    )
    extra = codex_params.provider_options(given)
    assert codex_params.config("thr", given, extra, ["/r"]) == {
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
    with pytest.raises(codex_params.ParamsError, match=r"Codex does not support the none reasoning level\."):
        codex_params.config("thr", options(reasoningLevel="none"), extra, [])
    with pytest.raises(codex_params.ParamsError):
        codex_params.provider_options(options(providerOptions={"memoryEnabled": "yes"}))


def test_fork_checkpoints_drop_the_legacy_prefix_and_inputs_map() -> None:
    fork = codex_params.construction(
        protocol.ThreadForkParams(
            threadId="thr",
            cwd="/w",
            sourceProviderThreadId="src",
            sourceProviderCheckpointId="bt0123abcd-12-turn",
            options=options(serviceTier="fast"),
        )
    )
    assert (
        list(fork)[:2] == ["threadId", "lastTurnId"] and fork["lastTurnId"] == "turn" and fork["serviceTier"] == "fast"
    )
    assert codex_params.user_input(protocol.LocalFileInput(path="/a")) == {
        "type": "text",
        "text": "[Attached file: /a]",
        "text_elements": [],
    }
    assert codex_params.user_input(protocol.ImageInput(url="u")) == {"type": "image", "url": "u"}


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


def test_instructions_follow_the_decoded_instruction_mode() -> None:
    """The params are the kit's typed decode, so an absent `instructionMode` is the protocol's default `append`."""
    start = protocol.ThreadStartParams(threadId="thr", cwd="/w", options=options(instructions="  be brief \n"))
    assert codex_params.construction(start)["developerInstructions"] == "be brief"
    replace = protocol.ThreadStartParams(
        threadId="thr", cwd="/w", options=options(instructions="x"), instructionMode="replace"
    )
    built = codex_params.construction(replace)
    assert built["baseInstructions"] == "x" and "developerInstructions" not in built

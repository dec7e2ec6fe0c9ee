"""`model/list` (spec §3.2): the catalog merged with what the CLI offers, against the recorded answer."""

from __future__ import annotations

import json

import msgspec
import pytest

from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, read_lane
from bridges.claude_code import models
from tests.conftest import missing_reason, shared_path

CELL = shared_path("recordings", "claude-code", "model-list")
# the CLI's `ModelInfo` list of the recording's machine, as the recorded answer implies it
PROBED = [
    {"value": "default", "displayName": "Default (recommended)", "description": "Opus 5", "resolvedModel": "claude-opus-5[1m]"},
    {"value": "opus[1m]", "displayName": "Opus (1M)", "description": "Opus", "resolvedModel": "claude-opus-5[1m]"},
    {"value": "sonnet", "displayName": "Sonnet", "description": "Sonnet", "resolvedModel": "claude-sonnet-5", "supportedEffortLevels": ["low", "medium", "high"]},
    {"value": "haiku", "displayName": "Haiku", "description": "Haiku 4.5 · Fastest for quick answers · $1/$5 per Mtok", "resolvedModel": "claude-haiku-4-5-20251001"},
    {"value": "claude-marshmallow-ht-eap[1m]", "displayName": "claude-marshmallow-ht-eap[1m]", "description": "Custom model", "supportedEffortLevels": ["low", "medium", "high", "xhigh", "max"]},
]  # fmt: skip


@pytest.mark.skipif(CELL is None, reason=missing_reason("recordings", "claude-code", "model-list"))
def test_the_recorded_model_list() -> None:
    assert CELL is not None
    lines = [json.loads(e.line) for e in read_lane(CELL / f"{BRIDGE_TO_RUNTIME}.ndjson", BRIDGE_TO_RUNTIME)]
    recorded = next(m["result"] for m in lines if "models" in m.get("result", {}))
    assert msgspec.json.encode(models.build(PROBED)) == msgspec.json.encode(recorded)


def test_without_discovery_the_catalog_defaults_to_opus() -> None:
    result = models.build([])
    assert [m["model"] for m in result["models"] if m["isDefault"]] == ["claude-opus-5[1m]"]
    assert len(result["models"]) == 5 and result["selectedOnlyModels"] == []


def test_default_follows_the_clis_default_and_efforts_map() -> None:
    result = models.build(
        [
            {"value": "default", "resolvedModel": "claude-sonnet-5"},
            {"value": "x", "supportedEffortLevels": ["medium", "max"]},
        ]
    )
    assert [m["model"] for m in result["models"] if m["isDefault"]] == ["claude-sonnet-5"]
    extra = result["models"][-1]
    assert (extra["model"], extra["defaultReasoningEffort"]) == ("x", "medium")
    assert [e["reasoningEffort"] for e in extra["supportedReasoningEfforts"]] == ["medium", "max"]

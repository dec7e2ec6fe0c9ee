"""Codex `model/list` parsing (spec §2.2): the recorded `model-list` cell byte for byte, and the fallbacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bbridge.core import js
from bbridge.wire.lanes import (
    BRIDGE_TO_PROVIDER,
    BRIDGE_TO_RUNTIME,
    PROVIDER_TO_BRIDGE,
    RUNTIME_TO_BRIDGE,
    read_cell,
)
from bridges.codex import models

CELL = Path(__file__).resolve().parents[2] / "shared" / "recordings" / "codex" / "model-list"


@pytest.mark.skipif(not CELL.exists(), reason="no recordings")
def test_the_recorded_model_list() -> None:
    entries = [(entry.dir, js.parse(entry.line)) for entry in read_cell(CELL)]
    (asked,) = [m for d, m in entries if d == RUNTIME_TO_BRIDGE and m.get("method") == "model/list"]
    (sent,) = [m for d, m in entries if d == BRIDGE_TO_PROVIDER and m.get("method") == "model/list"]
    (codex,) = [m for d, m in entries if d == PROVIDER_TO_BRIDGE and m.get("id") == sent["id"]]
    (answer,) = [m for d, m in entries if d == BRIDGE_TO_RUNTIME and m.get("id") == asked["id"]]
    assert sent["params"] == {}
    assert js.stringify(models.model_list(codex["result"])) == js.stringify(answer["result"])


def test_efforts_fall_back_and_defaults_follow_the_list() -> None:
    entry: dict[str, Any] = {
        "id": "m",
        "model": "m",
        "displayName": "",
        "supportedReasoningEfforts": [{"reasoningEffort": "turbo"}],
    }
    (model,) = models.model_list({"data": [entry, {"id": "", "model": "x"}]})["models"]
    assert [e["reasoningEffort"] for e in model["supportedReasoningEfforts"]] == ["low", "medium", "high", "xhigh"]
    assert (model["displayName"], model["description"], model["defaultReasoningEffort"], model["isDefault"]) == (
        "m",
        "",
        "low",
        False,
    )
    listed = [{"reasoningEffort": "max", "description": ""}, {"reasoningEffort": "max", "description": "dup"}]
    (picked,) = models.model_list(
        {
            "data": [
                {
                    "id": "a",
                    "model": "a",
                    "supportedReasoningEfforts": listed,
                    "defaultReasoningEffort": "max",
                    "isDefault": True,
                }
            ]
        }
    )["models"]
    assert picked["supportedReasoningEfforts"] == [
        {"reasoningEffort": "max", "description": "Maximum reasoning effort"}
    ]
    assert (picked["defaultReasoningEffort"], picked["isDefault"]) == ("max", True)


def test_unusable_answers() -> None:
    with pytest.raises(models.ModelListError, match="Invalid response"):
        models.model_list({"items": []})
    with pytest.raises(models.ModelListError, match="no supported models"):
        models.model_list({"data": [{"id": "a"}]})

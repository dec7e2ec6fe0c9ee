"""Codex app-server notifications for the translator tests, and the deltas as the wire carries them (each batch
through the grammar check of `session.delta_params`).
"""

from __future__ import annotations

import json
from typing import Any

from bbridge.core import grammar as g
from bridges.codex.session import delta_params
from bridges.codex.translate import Translator

THREAD, TURN = "th-1", "tu-1"


def out(deltas: list[g.Delta]) -> list[dict[str, Any]]:
    encoded: list[dict[str, Any]] = json.loads(delta_params("thr_x", deltas))["deltas"]
    return encoded


def run(t: Translator, method: str, **params: Any) -> list[dict[str, Any]]:
    return out(t.translate({"method": method, "params": params}))


def item(t: Translator, method: str, **fields: Any) -> list[dict[str, Any]]:
    return run(t, method, threadId=THREAD, turnId=TURN, item={"id": "i1", **fields})


def command(status: str = "completed", output: str | None = None, item_id: str = "call_1") -> dict[str, Any]:
    return {
        "type": "commandExecution",
        "id": item_id,
        "command": "/bin/bash -lc 'ls -la'",
        "cwd": "/w",
        "status": status,
        "aggregatedOutput": output,
        "exitCode": 0,
        "durationMs": 5,
    }

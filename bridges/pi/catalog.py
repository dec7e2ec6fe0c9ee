"""pi-ai 0.84.0's builtin model catalog, as far as the wire needs it: each model's context window ([T22]).

`catalog.json` is generated from the pinned package by `python -m tools.pi_catalog` (a test checks it against
the installed package); it holds builtin models only, which is the reference's rule: custom models from
`models.json` report `modelContextWindow: null` even though pi knows their window.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("catalog.json")


@functools.cache
def windows() -> dict[str, dict[str, int]]:
    data: dict[str, dict[str, int]] = json.loads(PATH.read_text())
    return data


def context_window(provider: Any, model: Any) -> int | None:
    """The builtin window of `<provider>/<model>`, or of the first builtin model with that id when no provider
    is named; None when the catalog has neither."""
    if not isinstance(model, str):
        return None
    if isinstance(provider, str) and provider:
        return windows().get(provider, {}).get(model)
    return next((models[model] for models in windows().values() if model in models), None)

"""Conformance fixtures: the scripted scenario's prompts, declarations and timeouts (protocol.md §7.1).

A fixture is user- or plugin-declared JSON, so it is validated with JSON Schema
before anything runs; prompt inputs, options and skill roots use the schemas
generated from the wire types, so a fixture cannot send what the runtime would
not. Every wait of a run takes its bound from here, so a hung bridge costs a
known time and yields FAIL lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
import msgspec

from bbridge.replay.driver import Pacing
from bbridge.wire import maintenance, protocol

DEFAULT_FIXTURE = Path(__file__).resolve().parents[2] / "conformance" / "default.json"
# protocol.md §7.4 RECORDED_CONFORMANCE_CELLS
RECORDED_CELLS = (
    "turn-tools",
    "steer",
    "stop-interrupt",
    "approval-allow",
    "approval-deny",
    "user-question",
    "resume",
    "fork",
)
# §7.1: the kit's default execution options, the `full` policy
FULL_OPTIONS: dict[str, Any] = {
    "permissionMode": "full",
    "permissionScope": "full",
    "approvalReviewer": None,
    "permissionEscalation": None,
}


class FixtureError(ValueError):
    """A fixture file that is missing, not JSON or not valid; the message names the file and the problem."""


def _ms(minimum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": 600_000}


def _schema() -> dict[str, Any]:
    (inputs, options, roots), defs = msgspec.json.schema_components(
        [list[protocol.PromptInput], protocol.ExecutionOptions, list[maintenance.SkillRoot]],
        ref_template="#/$defs/{name}",
    )
    prompt = {**inputs, "minItems": 1}
    timeouts = {
        "waitMs": (_ms(1), "bound of every scripted wait (the kit's per-wait timeout)"),
        "settleMs": (_ms(0), "quiet period after a release stop"),
        "replayWaitMs": (_ms(1), "bound of every recorded-replay wait"),
        "replayOrderMs": (_ms(0), "best-effort wait for the recorded event count before each request"),
        "replayDrainMs": (_ms(0), "quiet period before each replayed request"),
        "replaySettleMs": (_ms(0), "quiet period after the last replayed response"),
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "bbridge conformance fixture",
        "type": "object",
        "additionalProperties": False,
        "required": ["promptInput"],
        "properties": {
            "description": {"type": "string"},
            "cwd": {"type": "string", "minLength": 1, "description": "thread cwd (default: a fresh temp dir)"},
            "promptInput": {**prompt, "description": "must elicit at least one assistant message"},
            "zeroWorkPromptInput": {**prompt, "description": "a prompt the provider completes without work"},
            "interruptPromptInput": {**prompt, "description": "keeps its turn running until interrupted"},
            "options": options,
            "skills": {
                "type": "object",
                "additionalProperties": False,
                "required": ["declared"],
                "properties": {"declared": {"type": "boolean"}, "roots": roots},
            },
            "icons": {
                "type": "object",
                "additionalProperties": False,
                "required": ["pluginId", "names"],
                "properties": {
                    "pluginId": {"type": "string", "minLength": 1},
                    "names": {"type": "array", "items": {"type": "string", "minLength": 1}},
                },
            },
            "timeouts": {
                "type": "object",
                "additionalProperties": False,
                "properties": {name: {**spec, "description": text} for name, (spec, text) in timeouts.items()},
            },
            "recorded": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "cells": {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
                    "concurrency": {"type": "integer", "minimum": 1, "maximum": 64},
                },
            },
        },
        "$defs": defs,
    }


FIXTURE_SCHEMA = _schema()
_validator = jsonschema.Draft202012Validator(FIXTURE_SCHEMA)


@dataclass(frozen=True)
class Timeouts:
    """Every bound of a run, in seconds; `replay` paces the recorded cells (§6.3)."""

    wait: float = 5.0
    settle: float = 0.15
    replay: Pacing = field(default_factory=Pacing)


@dataclass(frozen=True)
class Fixture:
    prompt_input: list[Any]
    zero_work_input: list[Any] | None = None
    interrupt_input: list[Any] | None = None
    cwd: str | None = None
    options: dict[str, Any] | None = None
    skills_declared: bool = False
    skill_roots: list[Any] | None = None
    icons: tuple[str, frozenset[str]] | None = None
    timeouts: Timeouts = Timeouts()
    recorded_cells: tuple[str, ...] = RECORDED_CELLS
    concurrency: int = 4

    @property
    def execution_options(self) -> dict[str, Any]:
        return self.options if self.options is not None else dict(FULL_OPTIONS)


_REPLAY_KEYS = {"wait": "replayWaitMs", "order": "replayOrderMs", "drain": "replayDrainMs", "settle": "replaySettleMs"}
Bounds = TypeVar("Bounds", "Timeouts", Pacing)


def _seconds(bounds: Bounds, given: dict[str, Any], keys: dict[str, str]) -> Bounds:
    """`bounds` with each field the fixture gives (in ms, under `keys[field]`) replaced, in seconds."""
    return replace(bounds, **{name: given[key] / 1000 for name, key in keys.items() if key in given})


def parse_fixture(data: Any, where: str = "fixture") -> Fixture:
    """Validate decoded fixture JSON; `FixtureError` names the first problem and where it is."""
    error = jsonschema.exceptions.best_match(_validator.iter_errors(data))
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path)
        raise FixtureError(f"{where}: {'at /' + path + ': ' if path else ''}{error.message}")
    t = data.get("timeouts", {})
    replay = _seconds(Pacing(), t, _REPLAY_KEYS)
    timeouts = _seconds(Timeouts(replay=replay), t, {"wait": "waitMs", "settle": "settleMs"})
    skills = data.get("skills", {})
    icons = data.get("icons")
    recorded = data.get("recorded", {})
    return Fixture(
        prompt_input=data["promptInput"],
        zero_work_input=data.get("zeroWorkPromptInput"),
        interrupt_input=data.get("interruptPromptInput"),
        cwd=data.get("cwd"),
        options=data.get("options"),
        skills_declared=skills.get("declared", False),
        skill_roots=skills.get("roots"),
        icons=None if icons is None else (icons["pluginId"], frozenset(icons["names"])),
        timeouts=timeouts,
        recorded_cells=tuple(recorded.get("cells", RECORDED_CELLS)),
        concurrency=recorded.get("concurrency", 4),
    )


def load_fixture(path: Path | None) -> Fixture:
    path = path if path is not None else DEFAULT_FIXTURE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FixtureError(f"cannot read fixture {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise FixtureError(f"{path}: not JSON: {exc}") from None
    return parse_fixture(data, str(path))

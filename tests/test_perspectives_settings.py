"""`[perspectives]` in `bbridge.toml` (issue 48): the table as the issue shows it, its defaults, every refusal (the
table refused whole, each reason naming its key), and `bbridge config check` reporting it; provider names are
only warned about there, never refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bbridge.cli import main
from bbridge.config_file import ConfigError
from bbridge.daemon.config import load_config
from bbridge.perspectives.settings import (
    PerspectivesConfig,
    PhaseTuple,
    load_perspectives,
    perspectives_from,
    unconfigured,
)

ISSUE_TABLE = """
[perspectives]
planner = { provider = "inherit", model = "", reasoning = "inherit", permission = "inherit" }
worker  = { provider = "inherit", model = "", reasoning = "inherit", permission = "inherit" }
panel = ["claude-code", "codex", "pi"]   # optional: workers take these providers in turn, lens by lens
anonymous = true                          # the synthesizer sees "Perspective 1..n", never a provider or model
planner_s = 15        # the planner, one retry included
wrapup_s = 1200       # then each unfinished worker is asked to wrap up (a steer)
hard_cap_s = 1500     # the whole run; a run-wide stop of every remaining hidden thread
synthesis_s = 90      # reserved inside the hard cap
spawn_timeout_s = 60  # each hidden thread's construction
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bbridge.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refusals(table: object) -> list[str]:
    config, refused = perspectives_from({"perspectives": table})
    assert config is None
    return [refusal.line() for refusal in refused]


def test_the_issue_table_loads_as_written(tmp_path: Path) -> None:
    config, refused = load_perspectives(write(tmp_path, ISSUE_TABLE))
    assert refused == ()
    assert config == PerspectivesConfig(panel=("claude-code", "codex", "pi"))
    assert config.planner == config.worker == PhaseTuple(None, None, None, None)
    assert (config.planner_s, config.wrapup_s, config.hard_cap_s, config.synthesis_s, config.spawn_timeout_s) == (
        15.0,
        1200.0,
        1500.0,
        90.0,
        60.0,
    )


def test_an_empty_table_is_every_default() -> None:
    config, refused = perspectives_from({"perspectives": {}})
    assert refused == () and config == PerspectivesConfig()
    assert config.anonymous is True and config.panel is None


def test_no_table_or_no_file_is_no_perspectives(tmp_path: Path) -> None:
    assert load_perspectives(None) == (None, ())
    assert load_perspectives(write(tmp_path, "[providers.x]\ncommand = ['x']\n")) == (None, ())


def test_an_unusable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_perspectives(write(tmp_path, "[perspectives\n"))


def test_tuples_read_configured_values_and_blank_or_inherit_as_none() -> None:
    config, refused = perspectives_from(
        {
            "perspectives": {
                "planner": {"provider": "codex", "model": "gpt-5", "reasoning": "high", "permission": "full"},
                "worker": {"provider": "", "model": "inherit", "reasoning": " ", "permission": "auto"},
            }
        }
    )
    assert refused == () and config is not None
    assert config.planner == PhaseTuple("codex", "gpt-5", "high", "full")
    assert config.worker == PhaseTuple(None, None, None, "auto")
    assert config.planner.describe() == "provider codex, model gpt-5, reasoning high, permission full"
    assert config.worker.describe() == "provider inherit, model inherit, reasoning inherit, permission auto"


def test_a_tuple_may_leave_keys_out() -> None:
    config, _ = perspectives_from({"perspectives": {"worker": {"model": "opus"}}})
    assert config is not None and config.worker == PhaseTuple(model="opus")


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ({"colour": "red"}, "perspectives: colour: unknown key (known: planner, worker, panel, anonymous, planner_s, "),
        ({"planner": {"provider": "x", "temperature": 1}}, "perspectives: planner: unknown key 'temperature' (known: "),
        ({"worker": "codex"}, "perspectives: worker: expected a table { provider, model, reasoning, permission }"),
        ({"worker": {"model": 5}}, "perspectives: worker: model: expected a string, got int"),
        ({"planner": {"reasoning": "extreme"}}, "perspectives: planner: reasoning: expected inherit or one of none, "),
        (
            {"worker": {"permission": "read-only"}},
            "perspectives: worker: permission: expected inherit or one of full, ",
        ),
        ({"panel": []}, "perspectives: panel: expected a list of provider ids (at least one"),
        ({"panel": "codex"}, "perspectives: panel: expected a list of provider ids"),
        ({"panel": ["codex", ""]}, "perspectives: panel: expected provider ids (non-empty strings)"),
        ({"panel": ["codex", 3]}, "perspectives: panel: expected provider ids (non-empty strings)"),
        ({"anonymous": "yes"}, "perspectives: anonymous: expected true or false, got str"),
        ({"planner_s": 0}, "perspectives: planner_s: expected a positive number of seconds, got 0"),
        ({"wrapup_s": -5}, "perspectives: wrapup_s: expected a positive number of seconds, got -5"),
        ({"hard_cap_s": "25m"}, "perspectives: hard_cap_s: expected a number of seconds, got str"),
        ({"synthesis_s": True}, "perspectives: synthesis_s: expected a number of seconds, got bool"),
        ({"spawn_timeout_s": float("nan")}, "perspectives: spawn_timeout_s: expected a positive number of seconds"),
        ({"spawn_timeout_s": float("inf")}, "perspectives: spawn_timeout_s: expected a positive number of seconds"),
    ],
)
def test_a_bad_key_refuses_the_whole_table_naming_it(table: dict[str, object], reason: str) -> None:
    (line,) = refusals(table)
    assert line.startswith(reason), line


def test_reasoning_and_permission_name_what_is_allowed() -> None:
    (reasoning,) = refusals({"planner": {"reasoning": "extreme"}})
    assert reasoning.endswith("none, low, medium, high, xhigh, ultracode, max, ultra, got 'extreme'")
    (permission,) = refusals({"worker": {"permission": "read-only"}})
    assert permission.endswith("full, accept-edits, auto, got 'read-only'")


def test_every_problem_is_reported_not_just_the_first() -> None:
    assert refusals({"anonymous": 1, "planner_s": -1, "bogus": 1}) == [
        "perspectives: anonymous: expected true or false, got int",
        "perspectives: planner_s: expected a positive number of seconds, got -1",
        "perspectives: bogus: unknown key (known: planner, worker, panel, anonymous, planner_s, wrapup_s, "
        "hard_cap_s, synthesis_s, spawn_timeout_s)",
    ]


def test_a_table_that_is_not_a_table_is_refused() -> None:
    assert refusals(["x"]) == ["perspectives: expected a table, got list"]


@pytest.mark.parametrize(
    ("budgets", "reasons"),
    [
        ({"synthesis_s": 1500}, ["synthesis_s (1500) must be less than hard_cap_s (1500)"]),
        ({"synthesis_s": 2000, "wrapup_s": 3000}, ["synthesis_s (2000) must be less than hard_cap_s (1500)"]),
        ({"wrapup_s": 1410}, ["wrapup_s (1410) must be less than hard_cap_s - synthesis_s (1410)"]),
        ({"hard_cap_s": 100, "synthesis_s": 30, "wrapup_s": 80}, ["wrapup_s (80) must be less than hard_cap_s - "]),
        (
            {"hard_cap_s": 100, "synthesis_s": 30, "wrapup_s": 60, "planner_s": 70},
            ["planner_s (70) must be less than hard_cap_s - synthesis_s (70)"],
        ),
    ],
)
def test_the_budgets_must_nest(budgets: dict[str, float], reasons: list[str]) -> None:
    lines = refusals(budgets)
    assert len(lines) == len(reasons)
    for line, reason in zip(lines, reasons, strict=True):
        assert line.startswith(f"perspectives: {reason}"), line


def test_budgets_just_inside_their_bounds_load() -> None:
    config, refused = perspectives_from(
        {
            "perspectives": {
                "hard_cap_s": 10,
                "synthesis_s": 2.5,
                "wrapup_s": 7.4,
                "planner_s": 1,
                "spawn_timeout_s": 0.5,
            }
        }
    )
    assert refused == () and config is not None
    assert (config.hard_cap_s, config.synthesis_s, config.wrapup_s) == (10.0, 2.5, 7.4)


def test_provider_names_are_not_checked_at_load() -> None:
    config, refused = perspectives_from(
        {"perspectives": {"planner": {"provider": "nonesuch"}, "panel": ["ghost", "codex"]}}
    )
    assert refused == () and config is not None
    assert config.providers() == [("planner.provider", "nonesuch"), ("panel[0]", "ghost"), ("panel[1]", "codex")]
    assert unconfigured(config, {"codex": object(), "echo": object()}) == [
        "perspectives.planner.provider: provider 'nonesuch' is not configured (providers: codex, echo)",
        "perspectives.panel[0]: provider 'ghost' is not configured (providers: codex, echo)",
    ]


def test_perspectives_is_a_known_section_to_the_providers_reader(tmp_path: Path) -> None:
    _, report = load_config(write(tmp_path, ISSUE_TABLE))
    assert report.refused == []


# -- bbridge config check -------------------------------------------------------------


def test_config_check_counts_the_table_and_warns_about_unconfigured_providers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = ISSUE_TABLE + '\n[providers.codex]\ncommand = ["codex-bridge"]\n'
    assert main(["config", "check", "--config", str(write(tmp_path, text))]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "warning perspectives.panel[0]: provider 'claude-code' is not configured (providers: codex, echo)",
        "warning perspectives.panel[2]: provider 'pi' is not configured (providers: codex, echo)",
        "ok: 2 providers (codex, echo); perspectives (panel: claude-code, codex, pi)",
    ]


def test_config_check_ok_with_an_inheriting_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--config", str(write(tmp_path, "[perspectives]\n"))]) == 0
    assert capsys.readouterr().out == "ok: 1 providers (echo); perspectives\n"


def test_config_check_reports_a_refused_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "[perspectives]\nsynthesis_s = 90\nhard_cap_s = 60\nworker = { permission = 'yolo' }\n"
    assert main(["config", "check", "--config", str(write(tmp_path, text))]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "refused perspectives: worker: permission: expected inherit or one of full, accept-edits, auto, got 'yolo'",
        "1 refused; 1 providers would serve (echo)",
    ]

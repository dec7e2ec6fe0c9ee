"""The `[[agents]]` contributions resolved for a thread's context (issue 47): each thread gets exactly the
contributions whose scope and conditions match; instructions compose prepends, the client's own, appends (a
replace winning over what came before); an exclude beats any include; a failing contribution is dropped for that
resolution alone and the rest apply; skill roots go to the providers that load them, and the hosted `skill` tool
reads the selected skills for the others."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgspec
import pytest

from bbridge.agents import resolve
from bbridge.agents.config import AgentsConfig, load_agents
from bbridge.agents.resolve import Agents
from bbridge.agents.skills import SKILL_TOOL
from bbridge.seams.agent_config import AgentConfigurer, AgentContext
from bbridge.wire.agent_config import AgentConfiguration, ResolvedTools
from tests.test_agents_config import make_skill


def agents(tmp_path: Path, text: str, *, refused: int = 0, **options: object) -> Agents:
    """An `Agents` of `text`, which must load with `refused` refusals."""
    path = tmp_path / "bbridge.toml"
    path.write_text(text, encoding="utf-8")
    config = load_agents(path)
    assert len(config.refused) == refused, config.refused
    return Agents(config, state_dir=tmp_path / "state", **options)  # type: ignore[arg-type]


def repo(path: Path, remote: str | None) -> Path:
    """A git work tree as git leaves it on disk: `.git/config`, with an origin remote when given."""
    (path / ".git").mkdir(parents=True)
    config = "[core]\n\trepositoryformatversion = 0\n"
    if remote is not None:
        config += f'[remote "origin"]\n\turl = {remote}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
    (path / ".git" / "config").write_text(config, encoding="utf-8")
    return path


def applied(configuration: AgentConfiguration) -> list[str]:
    return [outcome.id for outcome in configuration.contributions if outcome.applied]


def test_agents_is_what_the_daemon_calls(tmp_path: Path) -> None:
    configurer: AgentConfigurer = Agents(AgentsConfig())
    answer = configurer.resolve(AgentContext("codex", str(tmp_path)), "mine")
    assert answer.instructions.text == "mine" and answer.instructions.mode == "append"
    assert (answer.contributions, answer.skills, answer.envVars) == ([], [], {})


# -- scope and conditions -------------------------------------------------------------------------------------------

MATRIX = """
[[agents]]
id = "everyone"

[[agents]]
id = "alpha"
scope = {{ project = "{alpha}/**" }}

[[agents]]
id = "beta-on-codex"
scope = {{ project = "{beta}" }}
when = {{ provider = ["codex"] }}

[[agents]]
id = "claude-anywhere"
when = {{ provider = ["claude-code"] }}

[[agents]]
id = "acme-remote"
when = {{ git_remote = "github.com/acme/" }}

[[agents]]
id = "https-glob"
when = {{ git_remote = "https://*.org/*" }}

[[agents]]
id = "one-thread"
scope = {{ thread = "thr_alpha_codex" }}

[[agents]]
id = "claude-models"
when = {{ model = ["claude-*", "opus"] }}
"""


@pytest.fixture
def matrix(tmp_path: Path) -> tuple[Agents, dict[str, Path]]:
    projects = {
        "alpha": repo(tmp_path / "alpha", "git@github.com:acme/alpha.git"),
        "beta": repo(tmp_path / "beta", "https://example.org/beta.git"),
    }
    (projects["beta"] / "deep" / "er").mkdir(parents=True)
    return agents(tmp_path, MATRIX.format(**projects)), projects


EXPECTED = {
    ("alpha", "codex"): ["everyone", "alpha", "acme-remote", "one-thread"],
    ("alpha", "claude-code"): ["everyone", "alpha", "claude-anywhere", "acme-remote"],
    ("beta", "codex"): ["everyone", "beta-on-codex", "https-glob"],
    ("beta", "claude-code"): ["everyone", "claude-anywhere", "https-glob"],
}


@pytest.mark.parametrize(("project", "provider"), list(itertools.product(["alpha", "beta"], ["codex", "claude-code"])))
def test_each_project_and_provider_gets_exactly_its_contributions(
    matrix: tuple[Agents, dict[str, Path]], project: str, provider: str
) -> None:
    resolver, projects = matrix
    cwd = projects[project] / "deep" / "er" if project == "beta" else projects[project]
    context = AgentContext(provider, str(cwd), thread_id=f"thr_{project}_{provider.split('-')[0]}")
    assert applied(resolver.resolve(context)) == EXPECTED[project, provider]


def test_a_project_glob_matches_the_git_work_tree_root_of_a_deeper_cwd(matrix: tuple[Agents, dict[str, Path]]) -> None:
    """`beta-on-codex`'s glob is the project's root exactly; a cwd below it matches through its work tree."""
    resolver, projects = matrix
    answer = resolver.resolve(AgentContext("codex", str(projects["beta"] / "deep")))
    assert "beta-on-codex" in applied(answer)


def test_each_contribution_not_applied_says_why(matrix: tuple[Agents, dict[str, Path]], tmp_path: Path) -> None:
    resolver, projects = matrix
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    answer = resolver.resolve(AgentContext("pi", str(outside), thread_id="thr_x", model="gpt-5"))
    reasons = {outcome.id: outcome.reason for outcome in answer.contributions if not outcome.applied}
    assert reasons == {
        "alpha": f"scope project {projects['alpha']}/** does not match {outside}",
        "beta-on-codex": f"scope project {projects['beta']} does not match {outside}",
        "claude-anywhere": "provider pi not in [claude-code]",
        "acme-remote": "no origin remote (when git_remote is github.com/acme/): not in a git work tree",
        "https-glob": "no origin remote (when git_remote is https://*.org/*): not in a git work tree",
        "one-thread": "scope thread thr_alpha_codex does not match thr_x",
        "claude-models": "model gpt-5 does not match [claude-*, opus]",
    }
    assert not any(outcome.failed for outcome in answer.contributions)


def test_a_model_condition_needs_a_model(matrix: tuple[Agents, dict[str, Path]]) -> None:
    resolver, projects = matrix
    assert "claude-models" in applied(resolver.resolve(AgentContext("pi", None, model="claude-sonnet-4")))
    assert "claude-models" in applied(resolver.resolve(AgentContext("pi", None, model="opus")))
    [outcome] = [o for o in resolver.resolve(AgentContext("pi", None)).contributions if o.id == "claude-models"]
    assert outcome.reason == "no model given (when model is [claude-*, opus])"


def test_a_remote_condition_in_a_work_tree_without_origin(tmp_path: Path) -> None:
    project = repo(tmp_path / "p", None)
    resolver = agents(tmp_path, '[[agents]]\nid = "acme"\nwhen = { git_remote = "acme" }\n')
    [outcome] = resolver.resolve(AgentContext("codex", str(project))).contributions
    assert outcome.reason == f"no origin remote (when git_remote is acme): none in {project}"


def test_a_remote_with_a_password_is_not_repeated_in_a_reason(tmp_path: Path) -> None:
    project = repo(tmp_path / "p", "https://me:hunter2@example.org/p.git")
    resolver = agents(tmp_path, '[[agents]]\nid = "acme"\nwhen = { git_remote = "acme" }\n')
    [outcome] = resolver.resolve(AgentContext("codex", str(project))).contributions
    assert outcome.reason == "origin remote https://me:***@example.org/p.git does not match acme"


# -- composition ------------------------------------------------------------------------------------------------------


def contributions(*entries: tuple[str, str]) -> str:
    return "".join(f'[[agents]]\nid = "{mode}-{text}"\n{entry(mode, text)}\n' for mode, text in entries)


def entry(mode: str, text: str) -> str:
    return f'instructions = {{ mode = "{mode}", text = "{text}" }}'


def test_prepends_then_the_clients_own_then_appends(tmp_path: Path) -> None:
    resolver = agents(tmp_path, contributions(("append", "A1"), ("prepend", "P1"), ("append", "A2"), ("prepend", "P2")))
    answer = resolver.resolve(AgentContext("codex", None), "CLIENT")
    assert answer.instructions.text == "P1\n\nP2\n\nCLIENT\n\nA1\n\nA2"
    assert answer.instructions.mode == "append"
    assert resolver.resolve(AgentContext("codex", None)).instructions.text == "P1\n\nP2\n\nA1\n\nA2"


def test_a_replace_wins_over_everything_before_it_and_later_ones_compose_around_it(tmp_path: Path) -> None:
    resolver = agents(
        tmp_path,
        contributions(("prepend", "P1"), ("append", "A1"), ("replace", "R"), ("append", "A2"), ("prepend", "P2")),
    )
    answer = resolver.resolve(AgentContext("codex", None), "CLIENT")
    assert answer.instructions.text == "P2\n\nR\n\nA2"
    assert answer.instructions.mode == "replace"


def test_a_later_replace_wins_over_an_earlier_one(tmp_path: Path) -> None:
    resolver = agents(tmp_path, contributions(("replace", "R1"), ("append", "A1"), ("replace", "R2")))
    answer = resolver.resolve(AgentContext("codex", None), "CLIENT")
    assert (answer.instructions.text, answer.instructions.mode) == ("R2", "replace")


def test_a_contributions_text_is_stripped_and_the_clients_kept_as_sent(tmp_path: Path) -> None:
    (tmp_path / "rules.md").write_text("\n\nFrom the file.\n\n", encoding="utf-8")
    resolver = agents(tmp_path, '[[agents]]\nid = "f"\ninstructions = { mode = "prepend", file = "rules.md" }\n')
    answer = resolver.resolve(AgentContext("codex", None), "  indented client\n")
    assert answer.instructions.text == "From the file.\n\n  indented client\n"


def test_an_exclude_beats_any_include(tmp_path: Path) -> None:
    resolver = agents(
        tmp_path,
        '[[agents]]\nid = "a"\ntools = { include = ["grep", "deploy"] }\n'
        '[[agents]]\nid = "b"\ntools = { exclude = ["deploy"], include = ["grep", "lint"] }\n',
    )
    tools = resolver.resolve(AgentContext("codex", None)).tools
    assert (tools.include, tools.exclude) == (["grep", "deploy", "lint"], ["deploy"])
    assert [name for name in ("grep", "deploy", "lint", "other") if tools.allows(name)] == ["grep", "lint"]


def test_no_include_is_no_narrowing_and_an_exclude_still_wins() -> None:
    assert ResolvedTools(include=[], exclude=[]).allows("anything")
    assert not ResolvedTools(include=[], exclude=["deploy"]).allows("deploy")
    assert not ResolvedTools(include=["deploy"], exclude=["deploy"]).allows("other")  # narrowed to nothing


def test_env_merges_in_order_a_later_value_winning(tmp_path: Path) -> None:
    resolver = agents(
        tmp_path,
        '[[agents]]\nid = "a"\nenv = { BB_MODE = "loose", BB_A = "1" }\n'
        '[[agents]]\nid = "b"\nenv = { BB_MODE = "strict" }\n',
    )
    assert resolver.resolve(AgentContext("codex", None)).envVars == {"BB_MODE": "strict", "BB_A": "1"}


# -- failures ------------------------------------------------------------------------------------------------------------

FAILING = """
[[agents]]
id = "before"
instructions = { mode = "prepend", text = "Before." }
env = { BB_BEFORE = "1" }

[[agents]]
id = "from-file"
instructions = { mode = "append", file = "rules.md" }
tools = { exclude = ["deploy"] }
env = { BB_FILE = "1" }

[[agents]]
id = "after"
instructions = { mode = "append", text = "After." }
"""


def test_a_failing_contribution_is_dropped_whole_for_that_resolution_and_the_rest_apply(tmp_path: Path) -> None:
    resolver = agents(tmp_path, FAILING)
    context = AgentContext("codex", str(tmp_path), thread_id="thr_1")
    answer = resolver.resolve(context, "CLIENT")
    [failed] = [outcome for outcome in answer.contributions if outcome.failed]
    reason = f"instructions file {tmp_path / 'rules.md'}: No such file or directory"
    assert (failed.id, failed.applied, failed.reason) == ("from-file", False, reason)
    assert applied(answer) == ["before", "after"]
    assert answer.instructions.text == "Before.\n\nCLIENT\n\nAfter."
    assert answer.envVars == {"BB_BEFORE": "1"} and answer.tools.exclude == []
    assert resolver.report()["errors"] == [{"id": "from-file", "threadId": "thr_1", "reason": reason}]

    (tmp_path / "rules.md").write_text("From the file.", encoding="utf-8")  # for that resolution only
    answer = resolver.resolve(context, "CLIENT")
    assert applied(answer) == ["before", "from-file", "after"]
    assert answer.instructions.text == "Before.\n\nCLIENT\n\nFrom the file.\n\nAfter."
    assert answer.tools.exclude == ["deploy"]


def test_the_errors_kept_are_bounded_and_a_repeat_does_not_push_others_out(tmp_path: Path) -> None:
    resolver = agents(tmp_path, FAILING, error_bound=2)
    for thread in ("thr_1", "thr_2", "thr_1", "thr_1", "thr_3"):
        resolver.resolve(AgentContext("codex", None, thread_id=thread))
    assert [error["threadId"] for error in resolver.report()["errors"]] == ["thr_1", "thr_3"]


def test_a_missing_skill_or_an_unloaded_root_fails_its_contribution(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "review", "review")
    resolver = agents(
        tmp_path,
        '[[agents]]\nid = "missing"\nskills = ["team:nope"]\nenv = { BB_X = "1" }\n'
        '[[agents]]\nid = "unloaded"\nskills = ["gone:review"]\n'
        '[[agents]]\nid = "fine"\nskills = ["team:review"]\n'
        '[skills.roots.team]\npath = "skills"\n[skills.roots.gone]\npath = "nowhere"\n',
        refused=1,
    )
    answer = resolver.resolve(AgentContext("pi", None))
    assert [(o.id, o.failed, o.reason) for o in answer.contributions] == [
        ("missing", True, f"skill team:nope: not in {tmp_path / 'skills'}"),
        ("unloaded", True, "skill root 'gone' is not loaded (refused, or not declared)"),
        ("fine", False, msgspec.UNSET),
    ]
    assert [(s.root, s.name, len(s.revision)) for s in answer.skills] == [("team", "review", 64)]
    assert answer.envVars == {}


def test_resolve_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = agents(tmp_path, FAILING.replace("rules.md", "."))  # a directory: not a file to read

    def broken(*_: object) -> None:
        raise RuntimeError("surprise")

    answer = resolver.resolve(AgentContext("codex", None))
    assert [o.id for o in answer.contributions if o.failed] == ["from-file"]
    monkeypatch.setattr(resolve, "_mismatch", broken)
    answer = resolver.resolve(AgentContext("codex", None), "CLIENT")
    assert all(o.failed and o.reason == "unexpected error: RuntimeError('surprise')" for o in answer.contributions)
    assert answer.instructions.text == "CLIENT"


# -- skills --------------------------------------------------------------------------------------------------------------

SKILLS = """
[[agents]]
id = "skills"
skills = ["team:review", "team:deploy-notes", "other:review"]

[skills.roots.team]
path = "team"

[skills.roots.other]
path = "other"
providers = ["claude-code"]
"""


@pytest.fixture
def skilled(tmp_path: Path) -> Agents:
    make_skill(tmp_path / "team", "review", "review", "Review a change.")
    make_skill(tmp_path / "team", "ops/notes", "deploy-notes", "Notes for deploys.")
    (tmp_path / "team" / "ops" / "notes" / "steps.txt").write_text("1. deploy\n", encoding="utf-8")
    make_skill(tmp_path / "other", "r", "review", "Another review.")
    return agents(tmp_path, SKILLS)


def test_skill_roots_go_to_the_providers_that_load_them(skilled: Agents, tmp_path: Path) -> None:
    assert skilled.skill_roots("pi") is None and skilled.skill_roots("echo") is None
    assert skilled.skill_roots("acp-gemini") is None
    [codex] = skilled.skill_roots("codex") or []
    assert (codex.id, codex.path, codex.skills) == ("team", str(tmp_path / "state" / "roots" / "team"), [])
    assert sorted(link.name for link in Path(codex.path).iterdir()) == ["deploy-notes", "review"]
    claude = skilled.skill_roots("claude-code") or []
    assert [(root.id, root.path) for root in claude] == [
        ("team", str(tmp_path / "state" / "claude-plugins" / "team")),
        ("other", str(tmp_path / "state" / "claude-plugins" / "other")),
    ]


def test_a_claude_code_root_is_a_plugin_directory_of_links(skilled: Agents, tmp_path: Path) -> None:
    skilled.skill_roots("claude-code")
    plugin = tmp_path / "state" / "claude-plugins" / "team"
    assert (plugin / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8").count('"name": "team"') == 1
    links = sorted(path.name for path in (plugin / "skills").iterdir())
    assert links == ["deploy-notes", "review"]
    assert (plugin / "skills" / "deploy-notes").resolve() == (tmp_path / "team" / "ops" / "notes").resolve()
    assert (plugin / "skills" / "deploy-notes" / "SKILL.md").is_file()

    import shutil

    shutil.rmtree(tmp_path / "team" / "review")  # gone from the root: its link goes too
    skilled.skill_roots("claude-code")
    assert sorted(path.name for path in (plugin / "skills").iterdir()) == ["deploy-notes"]


def test_which_providers_take_roots_is_the_constructors_to_say(tmp_path: Path) -> None:
    make_skill(tmp_path / "team", "review", "review")
    (tmp_path / "other").mkdir()
    resolver = agents(tmp_path, SKILLS, native_skill_providers={"pi", "acp-gemini"})
    assert resolver.skill_roots("codex") is None
    assert [(root.id, root.path, root.skills) for root in resolver.skill_roots("pi") or []] == [
        ("team", str(tmp_path / "state" / "roots" / "team"), [])  # `other` is for claude-code only
    ]
    [listed] = resolver.skill_roots("acp-gemini") or []  # an ACP provider's roots list their skills (§3.3.13)
    assert [(s.name, s.description) for s in listed.skills] == [("review", "Does a thing.")]


def test_the_skill_tool_reads_a_selected_skill_by_name_or_root_and_name(skilled: Agents, tmp_path: Path) -> None:
    configuration = skilled.resolve(AgentContext("pi", None))
    result = skilled.read_skill(configuration, "deploy-notes")
    assert result["success"] is True
    [item] = result["contentItems"]
    text = item["text"]
    assert item["type"] == "inputText"
    assert text.startswith("---\nname: deploy-notes\ndescription: Notes for deploys.\n---\n# deploy-notes\n")
    assert f"Skill team:deploy-notes, in {tmp_path / 'team' / 'ops' / 'notes'}; its files:\n" in text
    assert text.endswith("- SKILL.md\n- steps.txt\n")
    assert skilled.read_skill(configuration, "other:review")["contentItems"][0]["text"].startswith("---\nname: review")


def test_the_skill_tool_names_what_it_may_read_otherwise(skilled: Agents) -> None:
    configuration = skilled.resolve(AgentContext("pi", None))
    ambiguous = skilled.read_skill(configuration, "review")
    unknown = skilled.read_skill(configuration, "secrets")
    choices = "team:review (Review a change.); team:deploy-notes (Notes for deploys.); other:review (Another review.)"
    assert ambiguous == {
        "success": False,
        "contentItems": [
            {"type": "inputText", "text": f"'review' names a skill in more than one root; give ROOT:NAME: {choices}"}
        ],
    }
    assert unknown["contentItems"][0]["text"] == f"No skill 'secrets'. The skills you may read: {choices}"
    assert unknown["success"] is False
    nothing = skilled.resolve(AgentContext("pi", None, thread_id="t"))
    nothing.skills = []
    assert skilled.read_skill(nothing, "review")["contentItems"][0]["text"] == (
        "No skill 'review': this thread has no skills to read."
    )


def test_the_skill_tool_declaration() -> None:
    assert SKILL_TOOL.name == "skill"
    assert SKILL_TOOL.inputSchema["required"] == ["name"]
    assert SKILL_TOOL.inputSchema["properties"]["name"]["type"] == "string"


def test_report(skilled: Agents, tmp_path: Path) -> None:
    assert skilled.report() == {
        "contributions": 1,
        "roots": [
            {"id": "team", "path": str(tmp_path / "team"), "providers": None, "skills": 2},
            {"id": "other", "path": str(tmp_path / "other"), "providers": ["claude-code"], "skills": 1},
        ],
        "refused": [],
        "errors": [],
    }


def test_a_plugin_directory_that_cannot_be_made_leaves_its_root_out(skilled: Agents, tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the state directory goes\n", encoding="utf-8")
    assert skilled.skill_roots("claude-code") == []  # the bridge still starts, without these roots
    errors = skilled.report()["errors"]
    assert [(error["id"], error["threadId"]) for error in errors] == [
        ("skills.roots.team", None),
        ("skills.roots.other", None),
    ]
    assert all(error["reason"].startswith("linked directory: ") for error in errors)

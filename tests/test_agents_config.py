"""`[[agents]]` and `[skills.roots.NAME]` of `bbridge.toml` (issue 47): a broken entry is refused with a reason
naming it and the rest load; `bbridge config check` reports those refusals beside the providers', and `bbridge
config explain` prints a context's resolution (text, and `--json` as the client API answers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from bbridge.agents.config import AgentsConfig, SkillRef, load_agents, path_glob
from bbridge.cli import main
from bbridge.config_file import ConfigError, Refusal
from bbridge.wire.agent_config import AgentConfiguration


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bbridge.toml"
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str) -> AgentsConfig:
    return load_agents(write(tmp_path, text))


def lines(config: AgentsConfig) -> list[str]:
    return [refusal.line() for refusal in config.refused]


def make_skill(root: Path, directory: str, name: str, description: str = "Does a thing.") -> Path:
    skill = root / directory
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n", "utf-8")
    return skill


# -- loading -----------------------------------------------------------------------------------------------------


def test_the_issue_example_loads_whole(tmp_path: Path) -> None:
    (tmp_path / "skills").mkdir()
    config = load(
        tmp_path,
        """
[[agents]]
id = "payments-rules"
scope = { project = "/srv/repos/payments/**" }
when = { provider = ["claude-code", "codex"], git_remote = "github.com/acme/" }
instructions = { mode = "append", text = "Never touch migrations/." }
tools = { include = ["grep_repo"], exclude = ["deploy"] }
skills = ["team:review-checklist"]
env = { BB_REVIEW_MODE = "strict" }

[skills.roots.team]
path = "skills"
providers = ["claude-code", "codex"]
""",
    )
    assert config.refused == ()
    [contribution] = config.contributions
    assert (contribution.id, contribution.index) == ("payments-rules", 0)
    assert contribution.scope.describe() == "project /srv/repos/payments/**"
    assert contribution.when.providers == ("claude-code", "codex")
    assert contribution.when.git_remote == "github.com/acme/" and contribution.when.remote_pattern is None
    assert contribution.instructions is not None and contribution.instructions.text == "Never touch migrations/."
    assert (contribution.include, contribution.exclude) == (("grep_repo",), ("deploy",))
    assert contribution.skills == (SkillRef("team", "review-checklist"),)
    assert contribution.env == {"BB_REVIEW_MODE": "strict"}
    root = config.roots["team"]
    assert root.path == tmp_path / "skills" and root.providers == ("claude-code", "codex")
    assert root.applies_to("codex") and not root.applies_to("pi")


def test_defaults_scope_all_and_append_and_a_file_relative_to_the_toml(tmp_path: Path) -> None:
    config = load(tmp_path, '[[agents]]\nid = "a"\ninstructions = { file = "rules/a.md" }\n')
    [contribution] = config.contributions
    assert contribution.scope.kind == "all"
    assert contribution.instructions is not None
    assert contribution.instructions.mode == "append"
    assert contribution.instructions.file == tmp_path / "rules" / "a.md"  # not read yet: read at each resolution


def test_a_repeated_id_is_refused_and_the_first_kept(tmp_path: Path) -> None:
    config = load(tmp_path, '[[agents]]\nid = "x"\n[[agents]]\nid = "y"\n[[agents]]\nid = "x"\n')
    assert [c.id for c in config.contributions] == ["x", "y"]
    assert lines(config) == ['agents[2] (id "x"): id: repeated (first at agents[0])']


def test_an_env_name_not_starting_bb_is_refused(tmp_path: Path) -> None:
    config = load(tmp_path, '[[agents]]\nid = "x"\nenv = { PATH = "/bin", BB_OK = "1" }\n[[agents]]\nid = "y"\n')
    assert [c.id for c in config.contributions] == ["y"]
    assert lines(config) == ["agents[0] (id \"x\"): env: only BB_* names (BB_ then A-Z a-z 0-9 _): 'PATH'"]


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ('scope = "mine"', "scope: expected \"all\", { project = GLOB } or { thread = ID }, got 'mine'"),
        ('scope = { project = "relative/**" }', "scope: project: expected an absolute path glob, got 'relative/**'"),
        ('scope = { project = "/a", thread = "t" }', "scope: expected exactly one of project or thread"),
        ('scope = { repo = "/a" }', "scope: Object contains unknown field `repo`"),
        ('when = { provider = "codex" }', "when: Expected `array | null`, got `str` - at `.provider`"),
        ("when = { model = [] }", "when: model: expected a model glob or a list of them (non-empty strings)"),
        ('when = { branch = "main" }', "when: Object contains unknown field `branch`"),
        ('instructions = { mode = "append" }', "instructions: expected exactly one of text or file"),
        ('instructions = { text = "a", file = "b" }', "instructions: expected exactly one of text or file"),
        ('instructions = { mode = "after", text = "a" }', "instructions: Invalid enum value 'after' - at `.mode`"),
        ("when = { provider = [] }", "when: provider: expected provider ids (non-empty strings, at least one)"),
        ('tools = { include = [""] }', "tools: expected tool names (non-empty strings)"),
        ('skills = ["no-colon"]', "skills: expected ROOT:SKILL, got 'no-colon'"),
        ('skills = ["team:x"]', "skills: 'team:x': no [skills.roots.team] (declared: none)"),
        ("env = { BB_X = 1 }", "env: Expected `str`, got `int` - at `[...]`"),
        ('colour = "red"', "colour: unknown key (known: id, scope, when, instructions, tools, skills, env)"),
    ],
)
def test_a_broken_entry_is_refused_naming_it_and_the_rest_load(tmp_path: Path, entry: str, said: str) -> None:
    config = load(tmp_path, f'[[agents]]\nid = "bad"\n{entry}\n[[agents]]\nid = "good"\n')
    assert [c.id for c in config.contributions] == ["good"]
    assert lines(config) == [f'agents[0] (id "bad"): {said}']


def test_every_problem_of_an_entry_is_said_and_an_entry_without_an_id_is_named_by_its_place(tmp_path: Path) -> None:
    config = load(tmp_path, '[[agents]]\nscope = "x"\nenv = { HOME = "/" }\n')
    assert config.contributions == ()
    assert lines(config) == [
        "agents[0]: id: missing (required)",
        "agents[0]: scope: expected \"all\", { project = GLOB } or { thread = ID }, got 'x'",
        "agents[0]: env: only BB_* names (BB_ then A-Z a-z 0-9 _): 'HOME'",
    ]


def test_skill_roots_refused_with_their_reason(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    config = load(
        tmp_path,
        """
[skills]
extra = 1
[skills.roots.ok]
path = "ok"
[skills.roots.missing]
path = "nowhere"
[skills.roots."bad:name"]
path = "ok"
[skills.roots.typo]
paht = "ok"
""",
    )
    assert list(config.roots) == ["ok"]
    assert lines(config) == [
        "skills.extra: unknown key (known: roots, native)",
        f"skills.roots.missing: path: not a directory: {tmp_path / 'nowhere'}",
        "skills.roots.bad:name: bad root name (expected 1 to 64 of A-Z a-z 0-9 _ . -)",
        "skills.roots.typo: Object contains unknown field `paht`",
    ]


def test_a_contribution_may_name_a_declared_root_that_was_refused(tmp_path: Path) -> None:
    """Refused at load is only a root nobody declared (a typo); a declared one that failed fails at resolution."""
    config = load(tmp_path, '[[agents]]\nid = "a"\nskills = ["gone:x"]\n[skills.roots.gone]\npath = "nowhere"\n')
    assert [c.id for c in config.contributions] == ["a"]


@pytest.mark.parametrize("text", ["agents = 3\n", "skills = 3\n", "agents = { id = 'x' }\n"])
def test_a_section_of_the_wrong_type_makes_the_file_unusable(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"(agents|skills): expected"):
        load(tmp_path, text)


def test_no_file_no_agents() -> None:
    assert load_agents(None) == AgentsConfig()


@pytest.mark.parametrize(
    ("glob", "matches", "misses"),
    [
        ("/srv/x/**", ["/srv/x", "/srv/x/a", "/srv/x/a/b"], ["/srv/xy", "/srv", "/srv/y/x"]),
        ("/srv/*/app", ["/srv/a/app"], ["/srv/a/b/app", "/srv/app"]),
        ("/srv/**/app", ["/srv/app", "/srv/a/app", "/srv/a/b/app"], ["/srv/a/apps"]),
        ("/home/*/src/pay?", ["/home/me/src/pay1"], ["/home/me/src/pay", "/home/a/b/src/pay1"]),
        ("/r/[ab]*", ["/r/a1", "/r/b"], ["/r/c"]),
        ("/r/[!ab]", ["/r/c"], ["/r/a"]),
        ("/srv/pay**", ["/srv/payments/sub"], ["/srv/other"]),
    ],
)
def test_project_globs(glob: str, matches: list[str], misses: list[str]) -> None:
    pattern = path_glob(glob)
    assert [path for path in matches if pattern.fullmatch(path)] == matches
    assert [path for path in misses if pattern.fullmatch(path)] == []


# -- the command line ----------------------------------------------------------------------------------------------

BROKEN = """
[providers.my-agent]
command = ["my-bridge"]

[[agents]]
id = "ok"
instructions = { text = "Be brief." }

[[agents]]
id = "leaky"
env = { SECRET = "x" }
"""


def test_config_check_reports_agents_refusals_beside_the_providers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "check", "--config", str(write(tmp_path, BROKEN))]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "refused agents[1] (id \"leaky\"): env: only BB_* names (BB_ then A-Z a-z 0-9 _): 'SECRET'",
        "1 refused; 2 providers would serve (echo, my-agent); 1 agent contribution (ok)",
    ]


def test_config_check_reports_a_skill_leaving_its_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "skills"
    make_skill(root, "good", "good")
    (make_skill(root, "leaky", "leaky") / "secret").symlink_to("/etc/hostname")
    config = write(tmp_path, '[skills.roots.team]\npath = "skills"\n')
    assert main(["config", "check", "--config", str(config)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "refused skills.roots.team: leaky: secret: a symlink leaving the root",
        "1 refused; 1 providers would serve (echo); 1 skill root (team)",
    ]


def test_config_check_ok_counts_the_contributions_and_roots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s").mkdir()
    text = '[[agents]]\nid = "a"\n[[agents]]\nid = "b"\n[skills.roots.s]\npath = "s"\n'
    assert main(["config", "check", "--config", str(write(tmp_path, text))]) == 0
    assert capsys.readouterr().out == "ok: 1 providers (echo); 2 agent contributions (a, b); 1 skill root (s)\n"


EXPLAINED = """
[[agents]]
id = "house-style"
instructions = { mode = "prepend", text = "House style: short sentences." }
tools = { exclude = ["deploy"] }

[[agents]]
id = "payments"
scope = { project = "{project}/**" }
when = { provider = ["codex"] }
instructions = { text = "Never touch migrations/." }
skills = ["team:review"]
env = { BB_REVIEW = "strict" }

[[agents]]
id = "pi-only"
when = { provider = ["pi"] }
tools = { include = ["grep_repo"] }

[[agents]]
id = "missing-file"
instructions = { file = "gone.md" }

[skills.roots.team]
path = "skills"
"""


def explained(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "payments"
    (project / "src").mkdir(parents=True)
    make_skill(tmp_path / "skills", "review", "review", "Review a change.")
    return write(tmp_path, EXPLAINED.replace("{project}", str(project))), project


def test_config_explain_prints_each_contribution_and_the_composition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, project = explained(tmp_path)
    cwd = project / "src"
    argv = ["config", "explain", "--config", str(config), "--cwd", str(cwd), "--provider", "codex", "--model", "o3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    revision = re.search(r"revision ([0-9a-f]{64})", out)
    assert revision is not None
    assert out.splitlines() == [
        "context: provider codex, model o3, thread -",
        f"  cwd {cwd}",
        "  git work tree -, origin -",
        "contributions (in file order):",
        "  applied house-style",
        "  applied payments",
        "  skipped pi-only       provider codex not in [pi]",
        f"  FAILED  missing-file  instructions file {tmp_path / 'gone.md'}: No such file or directory",
        "instructions (instructionMode append):",
        "  | House style: short sentences.",
        "  |",
        "  | Never touch migrations/.",
        "tools: no narrowing",
        "  never deploy",
        "skills: (its bridge loads them from the skill roots)",
        f"  team:review  revision {revision[1]}",
        "env:",
        "  BB_REVIEW=strict",
    ]


def test_config_explain_json_is_the_client_apis_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, project = explained(tmp_path)
    argv = ["config", "explain", "--config", str(config), "--cwd", str(tmp_path), "--provider", "pi", "--json"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    answer = msgspec.json.decode(said, type=AgentConfiguration)
    assert json.loads(said) == msgspec.to_builtins(answer)
    assert [(c.id, c.applied, c.failed) for c in answer.contributions] == [
        ("house-style", True, False),
        ("payments", False, False),
        ("pi-only", True, False),
        ("missing-file", False, True),
    ]
    assert answer.contributions[1].reason == f"scope project {project}/** does not match {tmp_path}"
    assert answer.instructions.text == "House style: short sentences."
    assert (answer.tools.include, answer.tools.exclude) == (["grep_repo"], ["deploy"])
    assert (answer.skills, answer.envVars) == ([], {})


def test_config_explain_prints_the_refusals_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, '[[agents]]\nid = "x"\nenv = { X = "1" }\n')
    assert main(["config", "explain", "--config", str(config), "--cwd", str(tmp_path), "--provider", "echo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "refused agents[0] (id \"x\"): env: only BB_* names (BB_ then A-Z a-z 0-9 _): 'X'"
    assert "  (none)" in out


def test_refusal_is_one_type_for_every_reader() -> None:
    from bbridge.daemon.config import Refusal as DaemonRefusal

    assert DaemonRefusal is Refusal

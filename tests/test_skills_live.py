"""Agent configuration end to end (issue 47): the REAL Claude Code, codex and pi, their real bridges, the real
daemon, scripted models.

The daemon is built from a `bbridge.toml` written for the test (`[[agents]]`, `[skills.roots]`, read by
`bbridge.agents`) and the client sends a plain `thread/start` (no instructions, no `skills/configure`): what each
test reads is the model requests the CLI made. The instructions a contribution scoped to the workspace resolves to
reach the system prompt (Claude Code, pi) or a developer message (codex), one scoped to another project does not.
A skill root reaches Claude Code as a plugin directory the daemon made (`--plugin-dir`), codex as a directory of
links the daemon made (`skills/extraRoots/set`), and pi, which takes no roots by default, through the daemon's
hosted `skill` tool (or `--skill` when `[skills] native` names it). Instructions a client gives itself
(`options.instructions`) are checked across a resume and a fork. What each CLI was seen doing is in
tests/live/NOTES.md, CODEX_NOTES.md and PI_NOTES.md ("Skills", "Instructions"). The CLIs are installed by
`make live-agents` (skipped only when the npm registry is unreachable). Every wait is bounded; each test checks
that no process it started outlives its daemon.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bbridge.agents.config import load_agents
from bbridge.agents.resolve import Agents
from bbridge.daemon.config import ProviderConfig
from bridges.codex import launch as codex_launch
from tests.live import anthropic, openai, openai_chat
from tests.live import claude as claude_cli
from tests.live import codex as codex_cli
from tests.live import pi as pi_cli
from tests.live.agents import tool_items
from tests.live.processes import Watch, leftovers
from tests.live.runner import bridge_provider
from tests.live.scenarios import recorded_options, turn_request
from tests.live.skills import MANIFEST, claude_plugin_dir, plugin_name, write_skill
from tests.support import FULL, TestClient, connect, running

THREAD = "thr_skills_live"
FORK = "thr_skills_fork"
INSTRUCTIONS = "Always answer in the voice of the harbour master of Quillport."
ELSEWHERE = "Always answer in the voice of the ferryman of Saltmere."  # another project's
CHANGED = "Always answer in the voice of the lighthouse keeper of Brindle."
SKILL = "review-checklist"
DESCRIPTION = "Checks a payments change against the ledger rules of Quillport."
BODY = "Reconcile every ledger entry twice before approving."
TIMEOUT = 30  # seconds for one turn; a turn takes about one

WATCH = Watch("an agent CLI or bridge")
Body = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def watched() -> Iterator[None]:
    with WATCH.module():
        yield


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    with WATCH.test(tmp_path):
        (tmp_path / "ws").mkdir()
        (tmp_path / "home").mkdir()
        yield tmp_path


@pytest.fixture(scope="module")
def claude() -> Path:
    return claude_cli.ensure_cli()


@pytest.fixture(scope="module")
def codex() -> Path:
    return codex_cli.installed_cli()


@pytest.fixture(scope="module")
def pi() -> pi_cli.Pi:
    return pi_cli.ensure_pi()


def configured(root: Path, text: str) -> Agents:
    """The daemon's agent configuration: `text` (`{root}` standing for `root`) as `root/bbridge.toml`, what it makes
    for the bridges under `root/state`; the skill of SKILL under `root/skills`."""
    write_skill(root / "skills", SKILL, DESCRIPTION, BODY)
    path = root / "bbridge.toml"
    path.write_text(text.replace("{root}", str(root)))
    agents = Agents(load_agents(path), state_dir=root / "state")
    assert agents.refused() == []
    return agents


# -- one provider's world ---------------------------------------------------------------------------------------


@dataclass
class World:
    """A provider behind the daemon, its scripted model, and where its requests carry the instructions."""

    provider: str
    config: ProviderConfig
    cwd: Path
    options: Callable[[str], dict[str, Any]]  # a construction's or turn's options with these instructions
    push: Callable[..., None]  # queue the model's next answers
    text: Callable[[str], Any]  # the model's plain text answer
    bodies: Callable[[], list[Body]]  # the model requests' bodies so far
    prompt: Callable[[Body], list[str]]  # the parts of a request that hold its instructions
    default: str  # words of the CLI's own prompt, which `replace` takes out

    def start(self, instructions: str, mode: str = "append", thread: str = THREAD) -> dict[str, Any]:
        options = self.options(instructions)
        return {"providerId": self.provider, "threadId": thread, "cwd": str(self.cwd), "options": options,
                "instructionMode": mode}  # fmt: skip

    def plain(self) -> dict[str, Any]:
        """A `thread/start` with no instructions of the client's: only what the daemon's configuration resolves."""
        options = {key: value for key, value in self.options("").items() if key != "instructions"}
        return {"providerId": self.provider, "threadId": THREAD, "cwd": str(self.cwd), "options": options}

    async def turn(self, client: TestClient, construction: str, params: dict[str, Any], n: int = 1) -> str:
        """A construction, then one turn on it run to its end; the provider thread id."""
        ptid: str = (await client.request(construction, params))["providerThreadId"]
        thread = params["threadId"]
        turn = turn_request(self.provider, thread, ptid, f"Question {n}.", params["options"], n)
        await client.request("turn/start", turn)
        await client.wait_for(lambda: client.settled(thread), TIMEOUT)
        assert [e["status"] for e in client.of(thread, "turn/completed")] == ["completed"]
        return ptid


def claude_prompt(body: Body) -> list[str]:
    """The system prompt's blocks."""
    return [block["text"] for block in body["system"]]


def codex_prompt(body: Body) -> list[str]:
    """The developer messages' texts (codex 0.171.0 sends its base instructions as the first one, not as the
    Responses `instructions`)."""
    items = [item for item in body["input"] if item.get("role") == "developer"]
    return [part["text"] for item in items for part in item["content"]]


def pi_prompt(body: Body) -> list[str]:
    """The system message."""
    (system,) = [m["content"] for m in body["messages"] if m["role"] == "system"]
    return [system]


@contextlib.contextmanager
def claude_world(root: Path, cli: Path) -> Iterator[World]:
    with anthropic.AnthropicServer() as api:
        env = claude_cli.offline_env(api.url, root / "home", extra={"BB_CLAUDE_CODE_EXECUTABLE": str(cli)})
        yield World(
            "claude-code",
            bridge_provider("bridges.claude_code", env, root / "ws"),
            root / "ws",
            lambda instructions: recorded_options("claude-sonnet-4-5", instructions, FULL, {}),
            api.push,
            anthropic.text,
            lambda: [r.body for r in api.messages()],
            claude_prompt,
            "You are Claude Code, Anthropic's official CLI for Claude",
        )


@contextlib.contextmanager
def codex_world(root: Path, cli: Path) -> Iterator[World]:
    with openai.ScriptedResponses() as api:
        env = codex_cli.offline_env(root, api.base_url)
        env[codex_launch.COMMAND_ENV] = str(cli)
        env[codex_launch.ARGS_ENV] = json.dumps(["app-server"])
        yield World(
            "codex",
            bridge_provider("bridges.codex", env, root / "ws"),
            root / "ws",
            lambda instructions: recorded_options(codex_cli.MODEL, instructions, FULL, {}),
            api.push,
            openai.text,
            lambda: [r.body for r in api.posts()],
            codex_prompt,
            "You are Codex, a coding agent",
        )


@contextlib.contextmanager
def pi_world(root: Path, installed: pi_cli.Pi) -> Iterator[World]:
    with openai_chat.ScriptedChat() as api:
        extra = {"BB_PI_NODE": str(installed.node), "BB_PI_CLI": str(installed.cli)}
        env = pi_cli.offline_env(api.base_url, root / "home", extra=extra)
        model = f"{pi_cli.PROVIDER}/{pi_cli.MODEL}"
        yield World(
            "pi",
            bridge_provider("bridges.pi", env, root / "ws"),
            root / "ws",
            lambda instructions: {"model": model, "instructions": instructions, "envVars": {}, **FULL},
            api.push,
            openai_chat.text,
            lambda: [r.body for r in api.posts()],
            pi_prompt,
            "You are an expert coding assistant operating inside pi",
        )


@contextlib.contextmanager
def world(name: str, root: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    """The world of `name`; its CLI's fixture is asked for only here, so a missing CLI skips its cases alone."""
    makers: dict[str, tuple[Callable[[Path, Any], contextlib.AbstractContextManager[World]], str]] = {
        "claude-code": (claude_world, "claude"),
        "codex": (codex_world, "codex"),
        "pi": (pi_world, "pi"),
    }
    make, fixture = makers[name]
    with make(root, request.getfixturevalue(fixture)) as made:
        yield made


# -- a daemon configured by bbridge.toml -----------------------------------------------------------------------


async def configured_turn(live: World, root: Path, agents: Agents) -> tuple[TestClient, dict[str, Any]]:
    """A daemon built with `agents`, a plain `thread/start` and one turn on it; the client once the daemon stopped,
    and the thread's `agent/configuration`."""
    async with running(root, {live.provider: live.config}, agents=agents) as (_, path), connect(path) as client:
        await live.turn(client, "thread/start", live.plain())
        applied: dict[str, Any] = await client.request("agent/configuration", {"threadId": THREAD})
    return client, applied


# -- instructions -----------------------------------------------------------------------------------------------

PROVIDERS = ["claude-code", "codex", "pi"]
RULES = """
[[agents]]
id = "workspace-rules"
scope = { project = "{root}/ws/**" }
when = { provider = ["claude-code", "codex", "pi"] }
instructions = { mode = "MODE", file = "rules.md" }

[[agents]]
id = "other-project"
scope = { project = "{root}/elsewhere/**" }
instructions = { mode = "append", text = "ELSEWHERE" }
"""


@pytest.mark.parametrize("mode", ["append", "replace"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_configured_instructions_reach_the_prompt(
    root: Path, request: pytest.FixtureRequest, provider: str, mode: str
) -> None:
    """A contribution scoped to the workspace's project (`instructions = { file = "rules.md" }`) reaches the system
    prompt (Claude Code, pi) or a developer message (codex) of the model request, once, with no instructions from
    the client; `append` keeps the CLI's own prompt, `replace` takes it out. One scoped to another project reaches
    nothing."""
    (root / "rules.md").write_text(f"{INSTRUCTIONS}\n")
    agents = configured(root, RULES.replace("MODE", mode).replace("ELSEWHERE", ELSEWHERE))
    with world(provider, root, request) as live:
        live.push(live.text("ok"))
        _, applied = await configured_turn(live, root, agents)
        (body,) = live.bodies()
    prompt = "\n".join(live.prompt(body))
    assert prompt.count(INSTRUCTIONS) == 1 and json.dumps(body).count(INSTRUCTIONS) == 1
    assert (live.default in prompt) is (mode == "append")
    assert ELSEWHERE not in json.dumps(body)
    assert [(c["id"], c["applied"]) for c in applied["contributions"]] == [
        ("workspace-rules", True),
        ("other-project", False),
    ]


# -- skills -----------------------------------------------------------------------------------------------------


def test_a_plugin_directory_is_made_and_brought_up_to_date(tmp_path: Path) -> None:
    """`claude_plugin_dir` (no CLI): the manifest, one link per skill, stale links removed, bad names refused."""
    skills = tmp_path / "skills"
    first, second = (write_skill(skills, name, f"The {name} skill.", "Body.") for name in ("first", "second"))
    plugin = claude_plugin_dir(tmp_path / "plugin", "team: reviews@acme", {"first": first, "second": second})
    assert json.loads((plugin / MANIFEST).read_text()) == {"name": "team--reviews-acme"}
    assert {p.name: p.readlink() for p in (plugin / "skills").iterdir()} == {
        "first": first.resolve(),
        "second": second.resolve(),
    }
    assert claude_plugin_dir(plugin, "team", {"second": second}) == plugin
    assert [p.name for p in (plugin / "skills").iterdir()] == ["second"]
    assert plugin_name("  ") == "skills" and plugin_name("Team.1") == "Team.1"
    for name, source in (("../x", second), (".hidden", second), ("third", tmp_path)):
        with pytest.raises(ValueError):
            claude_plugin_dir(plugin, "team", {name: source})
    assert [p.name for p in (plugin / "skills").iterdir()] == ["second"]


SKILLS = """
NATIVE
[skills.roots.team]
path = "{root}/skills"

[[agents]]
id = "reviewers"
scope = { project = "{root}/ws/**" }
skills = ["team:review-checklist"]
"""


def skill_config(root: Path, native: list[str] | None = None) -> Agents:
    """The `team` root and a contribution selecting its skill for the workspace; `native`: `[skills] native`."""
    return configured(
        root, SKILLS.replace("NATIVE", "" if native is None else f"[skills]\nnative = {json.dumps(native)}\n")
    )


async def test_claude_code_loads_a_configured_skill_root_as_a_plugin_directory(
    root: Path, request: pytest.FixtureRequest
) -> None:
    """The daemon makes the root a plugin directory named for it under its state directory and the bridge passes it
    as `--plugin-dir`; the CLI lists the skill as `team:<skill>: <description>` in the first user message's skill
    reminder, and its `Skill` tool loads the SKILL.md body through the directory's link. No hosted `skill` tool."""
    agents = skill_config(root)
    plugin = root / "state" / "claude-plugins" / "team"
    with world("claude-code", root, request) as live:
        live.push(anthropic.reply(anthropic.tool_use("Skill", {"skill": f"team:{SKILL}"})), live.text("done"))
        async with running(root, {live.provider: live.config}, agents=agents) as (_, path), connect(path) as client:
            await live.turn(client, "thread/start", live.plain())
            (argv,) = [a for a in leftovers([root]).values() if a[0].endswith("/claude")]
            assert argv[argv.index("--plugin-dir") + 1] == str(plugin)
        first, second = live.bodies()
    listing = [b["text"] for b in first["messages"][0]["content"] if "skills are available" in b.get("text", "")]
    assert len(listing) == 1 and f"\n- team:{SKILL}: {DESCRIPTION}\n" in listing[0]
    tools = [tool["name"] for tool in first["tools"]]
    assert "Skill" in tools and not [name for name in tools if name.endswith("__skill")]
    result, loaded = second["messages"][-1]["content"]
    assert result["type"] == "tool_result" and result["content"].startswith(f"Launching skill: team:{SKILL}")
    assert loaded["text"].startswith(f"Base directory for this skill: {plugin}/skills/{SKILL}")
    assert BODY in loaded["text"]
    assert [item["tool"] for item in tool_items(client, THREAD)] == ["Skill"]


async def test_codex_lists_a_configured_skill_root_set_as_an_extra_root(
    root: Path, request: pytest.FixtureRequest
) -> None:
    """The daemon makes the root a directory of links to its skills under its state directory; the bridge sends it
    to codex (`skills/extraRoots/set`), which lists the skill in its `<skills_instructions>` developer message: the
    root under an alias in `### Skill roots`, then `- <name>: <description> (file: <alias>/<skill>/SKILL.md)`. No
    hosted `skill` tool."""
    agents = skill_config(root)
    linked = root / "state" / "roots" / "team"
    with world("codex", root, request) as live:
        live.push(live.text("ok"))
        await configured_turn(live, root, agents)
        (body,) = live.bodies()
    (listing,) = [part for part in codex_prompt(body) if part.startswith("<skills_instructions>")]
    alias = re.search(rf"^- `(r\d+)` = `{re.escape(str(linked))}`$", listing, re.MULTILINE)
    assert alias, listing
    assert f"\n- {SKILL}: {DESCRIPTION} (file: {alias[1]}/{SKILL}/SKILL.md)\n" in listing
    assert "skill" not in [tool.get("name") for tool in body["tools"]]


async def test_pi_reads_a_configured_skill_through_the_hosted_skill_tool(
    root: Path, request: pytest.FixtureRequest
) -> None:
    """pi is not in the default native set: its thread gets the daemon's hosted `skill` tool, whose description
    names the skills the contributions select, and no root. The model calls `skill {"name": <skill>}`; the daemon
    answers it (no client asked) and the next model request carries the SKILL.md text and the skill's files."""
    agents = skill_config(root)
    with world("pi", root, request) as live:
        live.push(openai_chat.tool_call("skill", {"name": SKILL}), live.text("done"))
        client, _ = await configured_turn(live, root, agents)
        first, second = live.bodies()
    (tool,) = [t["function"] for t in first["tools"] if t["function"]["name"] == "skill"]
    assert f"team:{SKILL} ({DESCRIPTION})" in tool["description"]
    (system,) = pi_prompt(first)
    assert "<available_skills>" not in system, system
    (result,) = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    text = result if isinstance(result, str) else "".join(part["text"] for part in result)
    assert BODY in text and f"description: {DESCRIPTION}" in text
    assert f"Skill team:{SKILL}, in {root / 'skills' / SKILL}; its files:\n- SKILL.md" in text
    assert client.requests == []
    assert [(item["tool"], item["status"]) for item in tool_items(client, THREAD)] == [("skill", "completed")]


async def test_pi_loads_a_configured_skill_root_when_native(root: Path, request: pytest.FixtureRequest) -> None:
    """With `[skills] native = ["pi"]` the daemon sends pi's bridge the root (a directory of links under its state
    directory), which it passes as `--skill`; pi lists the skill in its system prompt's `<available_skills>`, with
    the SKILL.md's path under that root (the link followed), and no hosted `skill` tool is offered."""
    agents = skill_config(root, native=["pi"])
    linked = root / "state" / "roots" / "team"
    with world("pi", root, request) as live:
        live.push(live.text("ok"))
        await configured_turn(live, root, agents)
        (body,) = live.bodies()
    (system,) = pi_prompt(body)
    entry = (
        f"<name>{SKILL}</name>\n    <description>{DESCRIPTION}</description>\n    <location>{linked}/{SKILL}/SKILL.md"
    )
    assert entry in system, system
    assert "skill" not in [tool["function"]["name"] for tool in body.get("tools", [])]


# -- instructions a client gives itself ----------------------------------------------------------------------------

# What a later construction of the same thread, asked with other instructions, made the model see: a resume (in a
# new daemon, so a new CLI) or a fork (a new provider session). Claude Code and codex replay the prompt their session
# was created with; a fork of a Claude Code session is made without its prompt snapshot (bridges/claude_code/fork.py),
# a codex fork copies the developer messages of its source; pi builds its prompt at every start.
KEEPS_ON_RESUME = {"claude-code": True, "codex": True, "pi": False}
KEEPS_ON_FORK = {"claude-code": False, "codex": True, "pi": False}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_changed_instructions_on_a_resume(root: Path, request: pytest.FixtureRequest, provider: str) -> None:
    with world(provider, root, request) as live:
        live.push(live.text("first"), live.text("second"))
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            ptid = await live.turn(client, "thread/start", live.start(INSTRUCTIONS))
        resume = {**live.start(CHANGED), "providerThreadId": ptid}
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            await live.turn(client, "thread/resume", resume, n=2)
        _, resumed = live.bodies()
    seen = "\n".join(live.prompt(resumed))
    kept = KEEPS_ON_RESUME[provider]
    assert (INSTRUCTIONS in seen, CHANGED in seen) == (kept, not kept), seen[-300:]
    assert "Question 1." in json.dumps(resumed)  # the history came back


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_changed_instructions_on_a_fork(root: Path, request: pytest.FixtureRequest, provider: str) -> None:
    with world(provider, root, request) as live:
        live.push(live.text("first"), live.text("second"))
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            ptid = await live.turn(client, "thread/start", live.start(INSTRUCTIONS))
            fork = {**live.start(CHANGED, thread=FORK), "sourceProviderThreadId": ptid}
            await live.turn(client, "thread/fork", fork, n=2)
        _, forked = live.bodies()
    seen = "\n".join(live.prompt(forked))
    kept = KEEPS_ON_FORK[provider]
    assert (INSTRUCTIONS in seen, CHANGED in seen) == (kept, not kept), seen[-300:]
    assert "Question 1." in json.dumps(forked)  # the history was copied

"""Skills and instructions end to end (issue 47): the REAL Claude Code, codex and pi, their real bridges, the real
daemon, scripted models.

A client sends `skills/configure {providerId, roots}` (forwarded to the provider's bridge, which latches the roots)
and constructions with `options.instructions` and a top-level `instructionMode`; each test reads the model requests
the CLI made. Claude Code loads a skill root as a plugin directory (`--plugin-dir`, made by
`tests.live.skills.claude_plugin_dir`), codex through `skills/extraRoots/set`, pi through `--skill`. What each CLI
was seen doing is in tests/live/NOTES.md, CODEX_NOTES.md and PI_NOTES.md ("Skills", "Instructions"). The CLIs are
installed by `make live-agents` (skipped only when the npm registry is unreachable). Every wait is bounded; each test
checks that no process it started outlives its daemon.
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

from bbridge.daemon.config import ProviderConfig
from bridges.codex import launch as codex_launch
from tests.live import anthropic, openai, openai_chat
from tests.live import claude as claude_cli
from tests.live import codex as codex_cli
from tests.live import pi as pi_cli
from tests.live.processes import Watch, leftovers
from tests.live.runner import bridge_provider
from tests.live.scenarios import recorded_options, turn_request
from tests.live.skills import MANIFEST, claude_plugin_dir, plugin_name, write_skill
from tests.support import FULL, TestClient, connect, running

THREAD = "thr_skills_live"
FORK = "thr_skills_fork"
INSTRUCTIONS = "Always answer in the voice of the harbour master of Quillport."
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


def skill_root(root: Path, *, linked: bool = False) -> Path:
    """A skill root holding the one skill, away from the workspace; `linked`: its directory a symlink to the skill
    kept elsewhere."""
    if not linked:
        return write_skill(root / "skills", SKILL, DESCRIPTION, BODY).parent
    (root / "linked").mkdir()
    (root / "linked" / SKILL).symlink_to(write_skill(root / "elsewhere", SKILL, DESCRIPTION, BODY))
    return root / "linked"


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

    async def configure(self, client: TestClient, path: Path, root_id: str = "team") -> None:
        roots = [{"id": root_id, "path": str(path), "skills": []}]
        assert await client.request("skills/configure", {"providerId": self.provider, "roots": roots}) == {"ok": True}

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


async def test_claude_code_loads_a_skill_root_as_a_plugin_directory(root: Path, request: pytest.FixtureRequest) -> None:
    """The plugin directory `claude_plugin_dir` makes (its skill a symlink) reaches the CLI as `--plugin-dir`;
    the CLI lists the skill as `<plugin>:<skill>: <description>` in the first user message's skill reminder,
    and its `Skill` tool loads the SKILL.md body through the link."""
    skills = skill_root(root)
    plugin = claude_plugin_dir(root / "plugins" / "team", "team", {SKILL: skills / SKILL})
    with world("claude-code", root, request) as live:
        live.push(anthropic.reply(anthropic.tool_use("Skill", {"skill": f"team:{SKILL}"})), live.text("done"))
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            await live.configure(client, plugin)
            await live.turn(client, "thread/start", live.start(INSTRUCTIONS))
            (argv,) = [a for a in leftovers([root]).values() if a[0].endswith("/claude")]
            assert argv[argv.index("--plugin-dir") + 1] == str(plugin)
        first, second = live.bodies()
    listing = [b["text"] for b in first["messages"][0]["content"] if "skills are available" in b.get("text", "")]
    assert len(listing) == 1 and f"\n- team:{SKILL}: {DESCRIPTION}\n" in listing[0]
    assert "Skill" in [tool["name"] for tool in first["tools"]]
    result, loaded = second["messages"][-1]["content"]
    assert result["type"] == "tool_result" and result["content"].startswith(f"Launching skill: team:{SKILL}")
    assert (
        loaded["text"].startswith(f"Base directory for this skill: {plugin}/skills/{SKILL}") and BODY in loaded["text"]
    )
    assert [e["item"]["tool"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "toolCall"] == [
        "Skill"
    ]


@pytest.mark.parametrize("linked", [False, True], ids=["directory", "symlink"])
async def test_codex_lists_a_skill_root_set_as_an_extra_root(
    root: Path, request: pytest.FixtureRequest, linked: bool
) -> None:
    """The bridge sends the root to codex (`skills/extraRoots/set`); codex lists the skill in its
    `<skills_instructions>` developer message: the root under an alias in `### Skill roots`, then
    `- <name>: <description> (file: <alias>/<skill>/SKILL.md)`. A symlinked skill directory is followed."""
    skills = skill_root(root, linked=linked)
    with world("codex", root, request) as live:
        live.push(live.text("ok"))
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            await live.configure(client, skills)
            await live.turn(client, "thread/start", live.start(INSTRUCTIONS))
        (body,) = live.bodies()
    (listing,) = [part for part in codex_prompt(body) if part.startswith("<skills_instructions>")]
    alias = re.search(rf"^- `(r\d+)` = `{re.escape(str(skills))}`$", listing, re.MULTILINE)
    assert alias, listing
    assert f"\n- {SKILL}: {DESCRIPTION} (file: {alias[1]}/{SKILL}/SKILL.md)\n" in listing


@pytest.mark.parametrize("linked", [False, True], ids=["directory", "symlink"])
async def test_pi_lists_a_skill_root_in_its_system_prompt(
    root: Path, request: pytest.FixtureRequest, linked: bool
) -> None:
    """The pi bridge passes each root as `--skill` (the daemon's hosted `skill` tool is not needed for pi); pi lists
    the skill in its system prompt's `<available_skills>`, with the SKILL.md's path under the root (a symlinked
    skill directory is followed)."""
    skills = skill_root(root, linked=linked)
    with world("pi", root, request) as live:
        live.push(live.text("ok"))
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            await live.configure(client, skills)
            await live.turn(client, "thread/start", live.start(INSTRUCTIONS))
        (body,) = live.bodies()
    (system,) = pi_prompt(body)
    entry = (
        f"<name>{SKILL}</name>\n    <description>{DESCRIPTION}</description>\n    <location>{skills}/{SKILL}/SKILL.md"
    )
    assert entry in system, system


# -- instructions -----------------------------------------------------------------------------------------------

PROVIDERS = ["claude-code", "codex", "pi"]


@pytest.mark.parametrize("mode", ["append", "replace"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_instructions_reach_the_prompt(
    root: Path, request: pytest.FixtureRequest, provider: str, mode: str
) -> None:
    """`options.instructions` of `thread/start` reach the system prompt (Claude Code, pi) or a developer message
    (codex) of the model request, once; `instructionMode: append` keeps the CLI's own prompt, `replace` takes it
    out."""
    with world(provider, root, request) as live:
        live.push(live.text("ok"))
        async with running(root, {live.provider: live.config}) as (_, path), connect(path) as client:
            await live.turn(client, "thread/start", live.start(INSTRUCTIONS, mode))
        (body,) = live.bodies()
    prompt = "\n".join(live.prompt(body))
    assert prompt.count(INSTRUCTIONS) == 1 and json.dumps(body).count(INSTRUCTIONS) == 1
    assert (live.default in prompt) is (mode == "append")


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

"""The contributions resolved for one thread's context: `Agents`, what the daemon calls before every construction
and turn (`bbridge.seams.agent_config.AgentConfigurer`).

A contribution applies when its scope matches and every `when` condition holds (the rules: `config.py`). Those
that apply compose in file order:
- instructions: the prepends in order, then the client's own `options.instructions`, then the appends, joined with
  blank lines (a contribution's text stripped of surrounding blank space, the client's kept as sent, an empty one
  left out). A `replace` sets the base to its text and drops everything composed before it, the client's own
  instructions and earlier prepends and appends alike; prepends and appends after it compose around it as around
  the client's. The mode is `replace` when any applied contribution replaced, else `append`;
- tools: `include` the union of the includes (empty: no narrowing), `exclude` the union of the excludes; a tool
  is selected when `ResolvedTools.allows` it, so an exclude beats any include;
- skills: each `ROOT:SKILL` once, in order, with its revision;
- env: merged in order, a later value of a name winning.
A contribution that fails (its instructions file unreadable, a skill missing or its root not loaded) is dropped
whole for that resolution, listed as failed with the reason, and its error kept for `report()`; the others apply.
`resolve` never raises.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from bbridge.agents.config import AgentsConfig, Contribution, InstructionsSource
from bbridge.agents.gitinfo import GitInfo, GitInfoCache, redact_remote, remote_forms
from bbridge.agents.plugins import claude_plugin_dir, linked_root
from bbridge.agents.skills import SKILL_TOOL, Skill, SkillError, SkillRoots
from bbridge.config_file import Refusal
from bbridge.seams.agent_config import AgentContext
from bbridge.wire import maintenance, protocol
from bbridge.wire.agent_config import (
    AgentConfiguration,
    ContributionOutcome,
    ResolvedInstructions,
    ResolvedSkill,
    ResolvedTools,
)

CLAUDE_CODE = "claude-code"
# The providers whose bridges load skill roots themselves (`skills/configure`): Claude Code as plugin directories,
# Codex through `skills/extraRoots/set`. Every other provider's threads get the hosted `skill` tool.
NATIVE_SKILL_PROVIDERS = frozenset({CLAUDE_CODE, "codex"})
ERROR_BOUND = 50  # the recent resolution errors `report()` keeps


class _Failed(Exception):
    """A contribution that applies but cannot be used this time; the message says why."""


@dataclass
class _Composition:
    """The applied contributions composed so far."""

    before: list[str] = field(default_factory=list)  # prepends
    base: str | None = None  # the client's instructions, or the last replace's text
    after: list[str] = field(default_factory=list)  # appends
    replaced: bool = False
    include: dict[str, None] = field(default_factory=dict)
    exclude: dict[str, None] = field(default_factory=dict)
    skills: dict[tuple[str, str], ResolvedSkill] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def add(self, contribution: Contribution, text: str | None, skills: list[ResolvedSkill]) -> None:
        source = contribution.instructions
        if source is not None and text is not None:
            if source.mode == "prepend":
                self.before.append(text)
            elif source.mode == "append":
                self.after.append(text)
            else:
                self.before, self.base, self.after, self.replaced = [], text, [], True
        self.include.update(dict.fromkeys(contribution.include))
        self.exclude.update(dict.fromkeys(contribution.exclude))
        self.skills.update({(skill.root, skill.name): skill for skill in skills})
        self.env.update(contribution.env)

    def instructions(self) -> ResolvedInstructions:
        pieces = [piece for piece in (*self.before, self.base, *self.after) if piece and piece.strip()]
        return ResolvedInstructions(text="\n\n".join(pieces), mode="replace" if self.replaced else "append")


class Agents:
    """`[[agents]]` and `[skills.roots]` resolved per thread; implements `AgentConfigurer`.

    `state_dir` holds what is made for the bridges (the Claude Code plugin directories; default
    `$XDG_STATE_HOME/bbridge/agents`); `native_skill_providers` the providers given skill roots to load
    themselves (the others get the hosted `skill` tool); `error_bound` the recent errors kept for `report()`.
    """

    def __init__(
        self,
        config: AgentsConfig,
        *,
        state_dir: Path | None = None,
        native_skill_providers: Collection[str] = NATIVE_SKILL_PROVIDERS,
        error_bound: int = ERROR_BOUND,
    ) -> None:
        self.config = config
        self.skills = SkillRoots(config.roots)
        self._git = GitInfoCache()
        self._state_dir = state_dir
        self._native = frozenset(native_skill_providers)
        self._errors: deque[dict[str, str | None]] = deque(maxlen=error_bound)
        self._lock = threading.Lock()  # resolutions may run in worker threads: the errors and plugin directories

    # -- resolution ------------------------------------------------------------------

    def git(self, cwd: str | None) -> GitInfo:
        """The git work tree and origin remote of `cwd` (nothing known when there is none, or it is unreadable)."""
        if not cwd:
            return GitInfo()
        try:
            return self._git.lookup(cwd)
        except (OSError, ValueError):
            return GitInfo()

    def resolve(self, context: AgentContext, client_instructions: str | None = None) -> AgentConfiguration:
        git = self.git(context.cwd)
        composed = _Composition(base=client_instructions)
        outcomes: list[ContributionOutcome] = []
        for contribution in self.config.contributions:
            try:
                mismatch = _mismatch(contribution, context, git)
                if mismatch is not None:
                    outcomes.append(ContributionOutcome(id=contribution.id, applied=False, reason=mismatch))
                    continue
                text = _instructions(contribution.instructions)
                skills = [self._skill(ref.root, ref.name) for ref in contribution.skills]
            except _Failed as exc:
                outcomes.append(self._failed(contribution, context, str(exc)))
                continue
            except Exception as exc:  # never raise into a turn: a surprise only drops its contribution
                outcomes.append(self._failed(contribution, context, f"unexpected error: {exc!r}"))
                continue
            composed.add(contribution, text, skills)
            outcomes.append(ContributionOutcome(id=contribution.id, applied=True))
        return AgentConfiguration(
            contributions=outcomes,
            instructions=composed.instructions(),
            tools=ResolvedTools(include=list(composed.include), exclude=list(composed.exclude)),
            skills=list(composed.skills.values()),
            envVars=composed.env,
        )

    def _skill(self, root: str, name: str) -> ResolvedSkill:
        try:
            skill = self.skills.skill(root, name)
            return ResolvedSkill(root=root, name=name, revision=self.skills.revision(skill))
        except SkillError as exc:
            raise _Failed(str(exc)) from None

    def _failed(self, contribution: Contribution, context: AgentContext, reason: str) -> ContributionOutcome:
        """The outcome of a contribution dropped this time, its error kept."""
        self._error(contribution.id, context.thread_id, reason)
        return ContributionOutcome(id=contribution.id, applied=False, failed=True, reason=reason)

    def _error(self, id_: str, thread_id: str | None, reason: str) -> None:
        """One error kept for `report()`; a repeat of one kept moves it last, so one failure every turn does not
        push the others out."""
        error = {"id": id_, "threadId": thread_id, "reason": reason}
        with self._lock:
            if error in self._errors:
                self._errors.remove(error)
            self._errors.append(error)

    # -- skills --------------------------------------------------------------------------

    def skill_roots(self, provider_id: str) -> list[maintenance.SkillRoot] | None:
        """The roots for `skills/configure` (None: the provider loads none; its threads get the `skill` tool):
        Claude Code's as plugin directories made under the state directory, the others' as directories of links
        there (`plugins.py`: only the skills indexing accepted); the skills are listed for an ACP provider's only
        (§3.3.13). Made afresh at each call (each construction), so a skill added to a root reaches the next."""
        if not self.takes_skill_roots(provider_id):
            return None
        roots: list[maintenance.SkillRoot] = []
        for root in self.config.roots.values():
            if not root.applies_to(provider_id):
                continue
            skills = self._skills_of(root.name)
            linked = {s.name: s.directory for s in skills}
            try:
                with self._lock:
                    if provider_id == CLAUDE_CODE:
                        path = claude_plugin_dir(self.state_dir / "claude-plugins" / root.name, root.name, linked)
                    else:
                        path = linked_root(self.state_dir / "roots" / root.name, linked)
            except (OSError, ValueError) as exc:  # the bridge still starts, without this root
                self._error(f"skills.roots.{root.name}", None, f"linked directory: {exc}")
                continue
            listed = provider_id == "acp" or provider_id.startswith("acp-")
            roots.append(
                maintenance.SkillRoot(
                    id=root.name,
                    path=str(path),
                    skills=[maintenance.Skill(name=s.name, description=s.description) for s in skills if listed],
                )
            )
        return roots

    def takes_skill_roots(self, provider_id: str) -> bool:
        """Whether the provider's bridge loads skill roots itself (else its threads read them with `skill`)."""
        native = self._native if self.config.native is None else self.config.native
        return provider_id in native

    def skill_tool(self, configuration: AgentConfiguration) -> protocol.DynamicTool:
        """The hosted `skill` tool, its description naming the skills this configuration selects (what a model
        reads before it knows to call it)."""
        listed = "; ".join(self._choice(s) for s in configuration.skills) or "none"
        return msgspec.structs.replace(SKILL_TOOL, description=f"{SKILL_TOOL.description} Skills: {listed}.")

    def _skills_of(self, root: str) -> list[Skill]:
        try:
            return list(self.skills.index(root).skills.values())
        except SkillError:
            return []  # a root gone for now: loaded empty, its skills back when it is

    @property
    def state_dir(self) -> Path:
        if self._state_dir is None:
            state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
            self._state_dir = Path(state) / "bbridge" / "agents"
        return self._state_dir

    def read_skill(self, configuration: AgentConfiguration, name: str) -> dict[str, Any]:
        """The hosted `skill` tool's result for `name` (`NAME` or `ROOT:NAME`) among the configuration's skills."""
        selected = configuration.skills
        matches = [s for s in selected if name in (s.name, f"{s.root}:{s.name}")]
        if len(matches) == 1:
            try:
                text = self.skills.read(self.skills.skill(matches[0].root, matches[0].name))
            except SkillError as exc:
                return _result(f"The skill {name!r} cannot be read now: {exc}", success=False)
            return _result(text)
        choices = "; ".join(self._choice(s) for s in selected)
        if not selected:
            return _result(f"No skill {name!r}: this thread has no skills to read.", success=False)
        if matches:
            return _result(f"{name!r} names a skill in more than one root; give ROOT:NAME: {choices}", success=False)
        return _result(f"No skill {name!r}. The skills you may read: {choices}", success=False)

    def _choice(self, selected: ResolvedSkill) -> str:
        try:
            return f"{selected.root}:{selected.name} ({self.skills.skill(selected.root, selected.name).description})"
        except SkillError:
            return f"{selected.root}:{selected.name}"

    # -- what is loaded ------------------------------------------------------------------

    def refused(self) -> list[Refusal]:
        """The entries the file's reading refused, then what each root's indexing refused (a symlink leaving it,
        a SKILL.md without a name), and a root unreadable now."""
        refused = list(self.config.refused)
        for root in self.config.roots:
            try:
                index = self.skills.index(root)
            except SkillError as exc:
                refused.append(Refusal(f"skills.roots.{root}", None, str(exc)))
                continue
            refused.extend(Refusal(f"skills.roots.{root}", None, line) for line in index.refused)
        return refused

    def report(self) -> dict[str, Any]:
        roots: list[dict[str, Any]] = []
        for root in self.config.roots.values():
            try:
                count: int | None = len(self.skills.index(root.name).skills)
            except SkillError:
                count = None
            providers = list(root.providers) if root.providers is not None else None
            roots.append({"id": root.name, "path": str(root.path), "providers": providers, "skills": count})
        return {
            "contributions": len(self.config.contributions),
            "roots": roots,
            "refused": msgspec.to_builtins(self.refused()),
            "errors": list(self._errors),
        }


def _mismatch(contribution: Contribution, context: AgentContext, git: GitInfo) -> str | None:
    """Why the contribution does not apply to the context, or None when it does."""
    scope, when = contribution.scope, contribution.when
    if scope.kind == "thread" and context.thread_id != scope.value:
        return f"scope {scope.describe()} does not match {context.thread_id or 'a context without a thread'}"
    if scope.kind == "project" and scope.pattern is not None:
        places = [place for place in (_normal(context.cwd), git.root) if place]
        if not any(scope.pattern.fullmatch(place) for place in dict.fromkeys(places)):
            where = " or ".join(dict.fromkeys(places)) or "a context without a cwd"
            return f"scope {scope.describe()} does not match {where}"
    if when.providers is not None and context.provider_id not in when.providers:
        return f"provider {context.provider_id} not in [{', '.join(when.providers)}]"
    if when.models is not None:
        models = ", ".join(when.models)
        if context.model is None:
            return f"no model given (when model is [{models}])"
        if not any(pattern.fullmatch(context.model) for pattern in when.model_patterns):
            return f"model {context.model} does not match [{models}]"
    if when.git_remote is not None:
        if git.remote is None:
            return f"no origin remote (when git_remote is {when.git_remote}): " + (
                f"none in {git.root}" if git.root else "not in a git work tree"
            )
        pattern, forms = when.remote_pattern, remote_forms(git.remote)
        if not any(pattern.fullmatch(form) if pattern else when.git_remote in form for form in forms):
            return f"origin remote {redact_remote(git.remote)} does not match {when.git_remote}"
    return None


def _instructions(source: InstructionsSource | None) -> str | None:
    """The contribution's instructions text, stripped; its file read now (unreadable: the contribution fails)."""
    if source is None:
        return None
    if source.file is None:
        return (source.text or "").strip()
    try:
        return source.file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _Failed(f"instructions file {source.file}: {why}") from None


def _normal(cwd: str | None) -> str | None:
    return os.path.normpath(cwd) if cwd else None


def _result(text: str, *, success: bool = True) -> dict[str, Any]:
    """A `ToolCallResult` (protocol.md §3.4) of one text item."""
    return {"success": success, "contentItems": [{"type": "inputText", "text": text}]}

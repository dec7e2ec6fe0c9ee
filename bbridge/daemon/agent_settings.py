"""The daemon's side of agent configuration (issue 47): each construction and turn resolved by the configurer
(`agent_config.AgentConfigurer`, above the daemon) and what the daemon keeps of it per thread.

A thread's context (its provider, `cwd` and model) is what its latest construction or turn said. A contribution
that failed is warned once on the thread (a `system/warning`, code `agent_config_failed`) for as long as it keeps
failing the same way, and listed in `daemon/status` (`agentConfig.errors`). The protocol freezes instructions per
provider session (protocol.md §4.4): a turn whose resolved instructions differ from those its session was built
with goes on, and `daemon/status` says so on the thread (`CHANGED_NOTE`) until the next construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from bbridge.core.events import Event
from bbridge.seams.agent_config import AgentConfigurer, AgentContext
from bbridge.wire import maintenance, protocol
from bbridge.wire.agent_config import AgentConfiguration, ResolvedInstructions, ResolvedTools

# A resume keeps the session's saved instructions on Claude Code and Codex (a fork too on Codex): only a new
# session is sure to take them (tests/test_skills_live.py).
SKILL_TOOL_NAME: Final = "skill"  # `AgentConfigurer.skill_tool`'s
CHANGED_NOTE: Final = (
    "instructions changed; applied at the next construction (a new thread/start; a resume keeps the session's "
    "instructions on Claude Code and Codex)"
)
EMPTY: Final = AgentConfiguration(
    contributions=[],
    instructions=ResolvedInstructions(text="", mode="append"),
    tools=ResolvedTools(include=[], exclude=[]),
    skills=[],
    envVars={},
)


@dataclass
class _Thread:
    context: AgentContext
    configuration: AgentConfiguration = EMPTY
    built_with: str | None = None  # the instructions its provider session was constructed with
    warned: set[tuple[str, str]] = field(default_factory=set)  # (contribution, reason) already warned


class AgentSettings:
    """Resolves a thread's configuration for each construction and turn, and keeps the latest per thread."""

    def __init__(
        self,
        configurer: AgentConfigurer | None,
        publish: Callable[[str, str, list[Event]], None],
    ) -> None:
        self.configurer = configurer
        self._publish = publish  # `Fanout.publish`: a daemon-made event on a thread
        self._threads: dict[str, _Thread] = {}

    def resolve(
        self,
        thread_id: str | None,
        provider_id: str,
        cwd: str | None,
        model: str | None,
        client_instructions: str | None,
    ) -> AgentConfiguration | None:
        """The configuration for this request (None: no configurer); a thread's context is completed from what
        its earlier requests said, and its failures warned."""
        if self.configurer is None:
            return None
        kept = self._threads.get(thread_id) if thread_id is not None else None
        if kept is not None:
            cwd = cwd if cwd is not None else kept.context.cwd
            model = model if model is not None else kept.context.model
        context = AgentContext(provider_id=provider_id, cwd=cwd, thread_id=thread_id, model=model)
        configuration = self.configurer.resolve(context, client_instructions)
        if thread_id is not None:
            if kept is None:
                kept = self._threads[thread_id] = _Thread(context)
            kept.context, kept.configuration = context, configuration
            self._warn(thread_id, provider_id, kept, configuration)
        return configuration

    def explain(self, context: AgentContext) -> AgentConfiguration:
        """`agent/configuration`: what resolves for a context, nothing kept or warned (no configurer: nothing)."""
        return EMPTY if self.configurer is None else self.configurer.resolve(context, None)

    def constructed(self, thread_id: str, configuration: AgentConfiguration | None) -> None:
        """A construction was sent with these instructions: its session is built with them."""
        kept = self._threads.get(thread_id)
        if kept is not None and configuration is not None:
            kept.built_with = configuration.instructions.text

    def of_thread(self, thread_id: str) -> AgentConfiguration | None:
        kept = self._threads.get(thread_id)
        return None if kept is None else kept.configuration

    def context_of(self, thread_id: str) -> AgentContext | None:
        kept = self._threads.get(thread_id)
        return None if kept is None else kept.context

    def forget(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)

    def thread_view(self, thread_id: str) -> dict[str, Any] | None:
        """For the thread's row in `daemon/status`: what applies, and whether its session lags behind."""
        kept = self._threads.get(thread_id)
        if kept is None:
            return None
        view: dict[str, Any] = {
            "applied": [c.id for c in kept.configuration.contributions if c.applied and not c.failed],
            "failed": [c.id for c in kept.configuration.contributions if c.failed],
        }
        if kept.built_with is not None and kept.built_with != kept.configuration.instructions.text:
            view["note"] = CHANGED_NOTE
        return view

    def skill_roots(self, provider_id: str) -> list[maintenance.SkillRoot] | None:
        """What a bridge of this provider is sent in `skills/configure` (None or empty: nothing is sent)."""
        return None if self.configurer is None else self.configurer.skill_roots(provider_id)

    def skill_tool(self, provider_id: str, configuration: AgentConfiguration | None) -> list[protocol.DynamicTool]:
        """The hosted `skill` tool, for a thread whose contributions select skills its provider cannot load."""
        if self.configurer is None or configuration is None or not configuration.skills:
            return []
        takes_roots = self.configurer.skill_roots(provider_id) is not None
        return [] if takes_roots else [self.configurer.skill_tool(configuration)]

    def serves_skill(self, thread_id: str, tool: str) -> bool:
        """Whether a hosted call of `tool` on the thread is the `skill` tool's (answered here, not by the host)."""
        kept = self._threads.get(thread_id)
        return (
            self.configurer is not None
            and kept is not None
            and bool(kept.configuration.skills)
            and tool == SKILL_TOOL_NAME
        )

    def read_skill(self, thread_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The `skill` tool's answer, from the skills the thread's latest resolution selects."""
        assert self.configurer is not None
        kept = self._threads.get(thread_id)
        configuration = EMPTY if kept is None else kept.configuration
        name = arguments.get("name")
        return self.configurer.read_skill(configuration, name if isinstance(name, str) else "")

    def report(self) -> dict[str, Any] | None:
        return None if self.configurer is None else self.configurer.report()

    def _warn(self, thread_id: str, provider_id: str, kept: _Thread, configuration: AgentConfiguration) -> None:
        failing = {(c.id, c.reason or "") for c in configuration.contributions if c.failed}
        for contribution, reason in sorted(failing - kept.warned):
            warning: Event = {"type": "system/warning", "threadId": thread_id, "scope": {"kind": "thread"}}
            warning["code"] = "agent_config_failed"
            warning["message"] = (
                f'Agent configuration "{contribution}" was left out of this turn: {reason} (fix it in bbridge.toml; '
                "the other contributions apply)"
            )
            warning["details"] = {"contribution": contribution, "reason": reason}
            self._publish(thread_id, provider_id, [warning])
        kept.warned = failing

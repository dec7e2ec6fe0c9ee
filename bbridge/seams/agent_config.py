"""What the daemon asks of agent configuration (issue 47), as a protocol: the resolver lives above the daemon
(`bbridge.agents`), which only knows this shape.

Before every construction and turn the daemon resolves the thread's context and applies the answer: the composed
instructions into `options.instructions` and `instructionMode`, `envVars` into `options.envVars`, the tool
selection over the hosted tools; a contribution that failed is dropped for that turn alone, with one
`system/warning` on the thread. At each bridge's start it sends `skills/configure` with the roots that apply to
its provider; a provider that takes no skill roots gets the hosted `skill` tool instead, limited to the skills the
thread's contributions select.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from bbridge.wire import maintenance, protocol
from bbridge.wire.agent_config import AgentConfiguration


@dataclass(frozen=True)
class AgentContext:
    """What a contribution's scope and conditions are matched against (the git work tree and remote are read by
    the resolver from `cwd`)."""

    provider_id: str
    cwd: str | None
    thread_id: str | None = None
    model: str | None = None


class AgentConfigurer(Protocol):
    def resolve(self, context: AgentContext, client_instructions: str | None = None) -> AgentConfiguration:
        """The contributions resolved for the context, the client's own instructions composed in (between the
        prepends and the appends). Never raises: a contribution that fails is listed with `failed` and `reason`."""
        ...

    def skill_roots(self, provider_id: str) -> list[maintenance.SkillRoot] | None:
        """The `skills/configure` roots for a bridge of this provider (None: it takes none, and its threads get
        the hosted `skill` tool)."""
        ...

    def skill_tool(self, configuration: AgentConfiguration) -> protocol.DynamicTool:
        """The hosted `skill` tool (`{name}`), offered to a thread whose provider takes no skill roots when its
        contributions select skills (its description may name them)."""
        ...

    def read_skill(self, configuration: AgentConfiguration, name: str) -> dict[str, Any]:
        """The hosted `skill` tool's `ToolCallResult` for `name` (a skill the configuration selects, as `NAME` or
        `ROOT:NAME`): its SKILL.md text and file list, or an error result naming the skills it may read."""
        ...

    def report(self) -> dict[str, Any]:
        """For `daemon/status`'s `agentConfig`: the contributions and roots loaded, the refused entries, and the
        recent resolution errors (`errors`: contribution id, thread, reason)."""
        ...

"""`bbridge config explain`'s text: what resolves for a context, each contribution applied or not and why, and the
composed result, as a person reads it (`--json` prints the `AgentConfiguration` itself, as the client API answers
`agent/configuration`)."""

from __future__ import annotations

from bbridge.agents.gitinfo import redact_remote
from bbridge.agents.resolve import Agents
from bbridge.seams.agent_config import AgentContext
from bbridge.wire.agent_config import AgentConfiguration


def explain(agents: Agents, context: AgentContext, configuration: AgentConfiguration) -> str:
    """The context, the contributions and the composed configuration, one section after another."""
    git = agents.git(context.cwd)
    lines = [
        f"context: provider {context.provider_id}, model {context.model or '-'}, thread {context.thread_id or '-'}",
        f"  cwd {context.cwd or '-'}",
        f"  git work tree {git.root or '-'}, origin {redact_remote(git.remote) if git.remote else '-'}",
        "contributions (in file order):",
    ]
    width = max((len(outcome.id) for outcome in configuration.contributions), default=0)
    for outcome in configuration.contributions:
        state = "applied" if outcome.applied else "FAILED " if outcome.failed else "skipped"
        reason = f"  {outcome.reason}" if isinstance(outcome.reason, str) else ""
        lines.append(f"  {state} {outcome.id.ljust(width)}{reason}".rstrip())
    if not configuration.contributions:
        lines.append("  (none)")
    instructions = configuration.instructions
    lines.append(f"instructions (instructionMode {instructions.mode}):")
    lines += [f"  | {line}".rstrip() for line in instructions.text.splitlines()] or ["  (none)"]
    tools = configuration.tools
    lines.append("tools: " + (f"only {', '.join(tools.include)}" if tools.include else "no narrowing"))
    if tools.exclude:
        lines.append(f"  never {', '.join(tools.exclude)}")
    how = (
        "its bridge loads them from the skill roots"
        if agents.takes_skill_roots(context.provider_id)
        else ("read through the hosted `skill` tool")
    )
    lines.append("skills:" + (f" ({how})" if configuration.skills else " (none)"))
    lines += [f"  {skill.root}:{skill.name}  revision {skill.revision}" for skill in configuration.skills]
    lines.append("env:" + ("" if configuration.envVars else " (none)"))
    lines += [f"  {name}={value}" for name, value in configuration.envVars.items()]
    return "\n".join(lines) + "\n"

"""Agent configuration as the client API shows it (issue 47): `agent/configuration {threadId} | {cwd, providerId,
model?}` answers an `AgentConfiguration`, the contributions of `bbridge.toml`'s `[[agents]]` resolved for one
thread's context. The daemon applies the same value to every construction and turn (`seams/agent_config.py`)."""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, UnsetType

from bbridge.core.scalars import NonEmpty, Wire

InstructionMode = Literal["append", "prepend", "replace"]


class AgentConfigurationParams(Wire, kw_only=True, forbid_unknown_fields=True):
    """A thread (its recorded context), or a context given outright (`cwd` and `providerId`, `model` optional)."""

    threadId: NonEmpty | UnsetType = UNSET
    cwd: NonEmpty | UnsetType = UNSET
    providerId: NonEmpty | UnsetType = UNSET
    model: NonEmpty | UnsetType = UNSET


class ContributionOutcome(Wire, kw_only=True):
    """One `[[agents]]` entry, in file order: applied, or not and why. `failed`: its scope and conditions matched
    but it could not be used this turn (its `file` unreadable, a skill missing), so it is dropped for this turn
    alone: not applied, and the reason says what failed."""

    id: str
    applied: bool
    reason: str | UnsetType = UNSET
    failed: bool = False


class ResolvedInstructions(Wire, kw_only=True):
    """The composed instructions (prepends, the client's own, appends; a `replace` wins over all before it) and the
    construction's `instructionMode`: `replace` when a contribution replaced, else `append`."""

    text: str
    mode: Literal["append", "replace"]


class ResolvedTools(Wire, kw_only=True):
    """The hosted tools' selection: `include` (empty: no narrowing) and `exclude` (always wins)."""

    include: list[str]
    exclude: list[str]

    def allows(self, name: str) -> bool:
        """Whether the tool `name` is selected: in `include` (or no narrowing) and not in `exclude`. The one place
        the rule lives, for the daemon applying a selection and for whoever shows it."""
        return (not self.include or name in self.include) and name not in self.exclude


class ResolvedSkill(Wire, kw_only=True):
    root: str
    name: str
    revision: str  # sha256 of the skill's files (their relative paths and bytes, in path order)


class AgentConfiguration(Wire, kw_only=True):
    contributions: list[ContributionOutcome]
    instructions: ResolvedInstructions
    tools: ResolvedTools
    skills: list[ResolvedSkill]
    envVars: dict[str, str]

"""Provider maintenance results and skills (protocol.md §3.3.2-§3.3.4, §3.3.13).

What a bridge answers to `provider/health`, `provider/usage` and
`provider/installation/*`, and the skill roots `skills/configure` carries: the
runtime's account and install screens read these, no turn ever does, so they
live apart from the session protocol in `bbridge.wire.protocol` (whose method
tables name them).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from bbridge.core.scalars import NonEmpty, PosInt, Wire

Cents = Annotated[int, Meta(ge=0)]
Percent = Annotated[int, Meta(ge=0, le=100)] | Annotated[float, Meta(ge=0, le=100)]


# -- results (§3.3.2-§3.3.4) ---------------------------------------------------


class Unsupported(Wire, kw_only=True):
    supported: Literal[False]


class Health(Wire, kw_only=True):
    status: Literal["ready", "not_installed", "unauthenticated", "expired", "unsupported_version", "unknown"]
    statusMessage: NonEmpty | None
    accountEmail: str | None
    planLabel: NonEmpty | None
    installedVersion: NonEmpty | None
    minimumSupportedVersion: NonEmpty | None
    canInstall: bool
    canUpdate: bool
    loginCommand: NonEmpty | None


class HealthReport(Wire, kw_only=True):
    supported: Literal[True]
    health: Health


class UsageCost(Wire, kw_only=True):
    usedUsdCents: Cents
    limitUsdCents: PosInt


class UsageWindow(Wire, kw_only=True):
    label: NonEmpty
    usedPercent: Percent
    resetsAt: NonEmpty | None
    cost: UsageCost | UnsetType = UNSET


class UsageStatus(Wire, tag_field="status", kw_only=True):
    pass


class UsageOk(UsageStatus, tag="ok", kw_only=True):
    accountEmail: str | None
    planLabel: NonEmpty | None
    windows: list[UsageWindow]


class UsageNotInstalled(UsageStatus, tag="not_installed", kw_only=True):
    pass


class UsageUnauthenticated(UsageStatus, tag="unauthenticated", kw_only=True):
    pass


class UsageExpired(UsageStatus, tag="expired", kw_only=True):
    pass


class UsageError(UsageStatus, tag="error", kw_only=True):
    message: NonEmpty
    planLabel: NonEmpty | None = None
    accountEmail: str | None = None


class UsageReport(Wire, kw_only=True):
    supported: Literal[True]
    usage: UsageOk | UsageNotInstalled | UsageUnauthenticated | UsageExpired | UsageError


class InstallAction(Wire, kw_only=True):
    kind: Literal["install", "update"]
    label: Literal["Install", "Update"]
    command: NonEmpty


class InstallationStatus(Wire, kw_only=True):
    """The bare status object (no `supported` wrapper)."""

    executableName: NonEmpty
    executablePath: NonEmpty | None
    installed: bool
    installSource: Literal["notInstalled", "npmGlobal", "external"]
    currentVersion: NonEmpty | None
    latestVersion: NonEmpty | None
    minimumSupportedVersion: NonEmpty | None
    npmPackageName: NonEmpty | None
    npmGlobalPackageVersion: NonEmpty | None
    installAction: InstallAction | None
    needsUpdate: bool
    versionUnsupported: bool


class InstallUnavailable(Wire, kw_only=True):
    available: Literal[False]
    message: NonEmpty


class InstallCommand(Wire, kw_only=True):
    command: NonEmpty
    args: Annotated[list[str], Meta(max_length=64)]
    displayCommand: NonEmpty


class Verification(Wire, tag_field="kind", kw_only=True):
    pass


class VerifyInstalled(Verification, tag="installed", kw_only=True):
    pass


class VerifyVersionChanged(Verification, tag="version_changed", kw_only=True):
    previousVersion: str | None


class VerifyVersionAtLeast(Verification, tag="version_at_least", kw_only=True):
    version: str


class InstallPlan(Wire, kw_only=True):
    available: Literal[True]
    command: InstallCommand
    verification: VerifyInstalled | VerifyVersionChanged | VerifyVersionAtLeast


# -- skills (§3.3.13) ----------------------------------------------------------


class Skill(Wire, kw_only=True):
    name: NonEmpty
    description: str


class SkillRoot(Wire, kw_only=True):
    id: NonEmpty
    path: NonEmpty
    skills: list[Skill]


class SkillsConfigureParams(Wire, kw_only=True):
    roots: list[SkillRoot]

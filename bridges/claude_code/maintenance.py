"""The maintenance methods (spec §3.3): health, usage and installation of the Claude Code CLI on this host.

They are host probes the runtime's account and install screens call, never a turn: each one looks at the CLI
(`which`, `--version`, `doctor`), npm, the stored OAuth credentials and Anthropic's usage endpoint afresh. A
probe that fails or times out counts as "no output", so a broken host degrades a screen instead of failing it.
Blocking work runs in trio's worker threads or as the kit's one-shot commands, so sessions keep streaming meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import trio

from bbridge.core import js
from bbridge.kit import cli_probes
from bbridge.kit.cli_probes import (
    INSTALL_CHECK_TIMEOUT_S,
    display_command,
    error_text,
    http_get,
    json_or_none,
    older,
    percent,
)
from bbridge.wire import maintenance as m
from bbridge.wire import protocol
from bridges.claude_code import launch

USAGE_URL = "https://api.anthropic.com/api/oauth/usage"
USAGE_HEADERS = {
    "Accept": "application/json",
    "Content-Type": "application/json",
    "anthropic-beta": "oauth-2025-04-20",
    "User-Agent": "claude-code/2.1.0",
}
NPM_PACKAGE = "@anthropic-ai/claude-code"
LOGIN_COMMAND = "claude /login"
KEYCHAIN_SERVICE = "Claude Code-credentials"
INSTALL_SCRIPT = (
    'tmp=$(mktemp "${TMPDIR:-/tmp}/provider-installation.XXXXXX") && trap \'rm -f "$tmp"\' EXIT && '
    'curl -fsSL https://claude.ai/install.sh -o "$tmp" && bash "$tmp"'
)
RATE_LIMITED = "Claude usage is rate limited right now. Try again shortly."
MALFORMED = "Claude usage response was malformed."
_MAX_TIER = re.compile(r"max_(\d+)x")
_CHANNEL = re.compile(r"Auto-update channel:\s*(\S+)")
HealthStatus = Literal["ready", "not_installed", "unauthenticated", "expired", "unknown"]


@dataclass(frozen=True, slots=True)
class Credentials:
    """The CLI's stored OAuth login, as far as health and usage need it."""

    token: str
    expires_at_ms: float | None
    plan_label: str | None


def plan_label(oauth: Mapping[str, Any]) -> str | None:
    """`Max (<n>x)` from the rate-limit tier, else the subscription type capitalized (§3.3)."""
    tier = oauth.get("rateLimitTier")
    match = _MAX_TIER.search(tier) if isinstance(tier, str) else None
    if match:
        return f"Max ({match.group(1)}x)"
    kind = oauth.get("subscriptionType")
    return kind[0].upper() + kind[1:] if isinstance(kind, str) and kind else None


def credentials_from(text: str) -> Credentials | None:
    """The `claudeAiOauth` login in a credentials document; None when there is no usable access token."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    oauth = document.get("claudeAiOauth") if isinstance(document, dict) else None
    if not isinstance(oauth, dict) or not isinstance(oauth.get("accessToken"), str) or not oauth["accessToken"]:
        return None
    return Credentials(oauth["accessToken"], _number(oauth.get("expiresAt")), plan_label(oauth))


def _number(value: Any) -> float | None:
    return float(value) if js.is_number(value) else None


def _window(label: str, entry: Any) -> m.UsageWindow | None:
    """One usage window, or None when the endpoint reports no figure for it."""
    if not isinstance(entry, dict):
        return None
    value = _number(entry.get("utilization"))
    value = _number(entry.get("percent")) if value is None else value
    if value is None:
        return None
    resets = entry.get("resets_at")
    return m.UsageWindow(
        label=label,
        usedPercent=percent(value),
        resetsAt=resets if isinstance(resets, str) and resets else None,
    )


def usage_windows(body: bytes) -> list[m.UsageWindow]:
    """Current session, weekly limit, then one per distinct model-scoped weekly limit (in the body's order)."""
    try:
        document = json.loads(body)
    except ValueError:
        raise ValueError(MALFORMED) from None
    if not isinstance(document, dict) or not isinstance(document.get("limits", []), list):
        raise ValueError(MALFORMED)
    windows = [
        _window("Current session", document.get("five_hour")),
        _window("Weekly limit", document.get("seven_day")),
    ]
    seen: set[str] = set()
    for limit in document.get("limits", []):
        if not isinstance(limit, dict) or limit.get("kind") != "weekly_scoped":
            continue
        scope = limit.get("scope")
        model = scope.get("model") if isinstance(scope, dict) else None
        name = model.get("display_name") if isinstance(model, dict) else None
        if isinstance(name, str) and name and name not in seen:
            seen.add(name)
            windows.append(_window(name, limit))
    return [w for w in windows if w is not None]


def latest_version(doctor: str | None, dist_tags: str | None) -> str | None:
    """The npm dist-tag of the channel `claude doctor` names (`stable`, else `latest`); None when npm cannot say."""
    channel = _CHANNEL.search(doctor) if doctor is not None else None
    tag = "stable" if channel is not None and channel.group(1).lower() == "stable" else "latest"
    tags = json_or_none(dist_tags)
    value = tags.get(tag) if isinstance(tags, dict) else None
    return value if isinstance(value, str) and value else None


class Maintenance:
    """The four maintenance handlers over one host environment (the bridge's: maintenance has no session)."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        usage_url: str = USAGE_URL,
        opener: urllib.request.OpenerDirector | None = None,
        platform: str = sys.platform,
    ) -> None:
        self.env = dict(env)
        self.usage_url = usage_url
        self.opener = opener if opener is not None else urllib.request.build_opener()
        self.platform = platform

    @property
    def command(self) -> str:
        return js.trim(self.env.get(launch.EXECUTABLE_ENV, "")) or "claude"

    @property
    def home(self) -> str:
        """The user's home as Node's `os.homedir()` finds it: `HOME`, else the account database."""
        return self.env.get("HOME") or os.path.expanduser("~")

    # -- probes ------------------------------------------------------------------------

    async def run(self, argv: Sequence[str], timeout: float) -> str | None:
        return await cli_probes.run_probe(argv, self.env, timeout)

    async def which(self) -> str | None:
        return await cli_probes.which(self.command, self.env)

    async def version(self) -> str | None:
        return await cli_probes.version(self.command, self.env)

    async def credentials(self) -> Credentials | None:
        """The login from the macOS keychain, else from `~/.claude/.credentials.json`."""
        if self.platform == "darwin":
            argv = ["security", "find-generic-password", "-s", KEYCHAIN_SERVICE, "-w"]
            stored = await self.run(argv, INSTALL_CHECK_TIMEOUT_S)
            found = credentials_from(stored) if stored is not None else None
            if found is not None:
                return found
        text = await self._read(os.path.join(self.home, ".claude", ".credentials.json"))
        return credentials_from(text) if text is not None else None

    async def account_email(self) -> str | None:
        document = json_or_none(await self._read(os.path.join(self.home, ".claude.json")))
        account = document.get("oauthAccount") if isinstance(document, dict) else None
        email = account.get("emailAddress") if isinstance(account, dict) else None
        return email if isinstance(email, str) else None

    async def _read(self, path: str) -> str | None:
        def read() -> str | None:
            try:
                with open(path, encoding="utf-8") as file:
                    return file.read()
            except (OSError, UnicodeDecodeError):
                return None

        return await trio.to_thread.run_sync(read)

    # -- provider/health ---------------------------------------------------------------

    async def health(self, params: protocol.MaintenanceParams) -> m.HealthReport:
        try:
            health = await self._health()
        except Exception as exc:
            health = cli_probes.health("unknown", login_command=LOGIN_COMMAND, message=error_text(exc))
        return m.HealthReport(supported=True, health=health)

    async def _health(self) -> m.Health:
        if await self.which() is None:
            return cli_probes.health("not_installed", login_command=LOGIN_COMMAND)
        version = await self.version()
        creds = await self.credentials()
        email = await self.account_email()
        plan = creds.plan_label if creds is not None else None
        status = _login_status(creds)
        return cli_probes.health(status, login_command=LOGIN_COMMAND, email=email, plan=plan, version=version)

    # -- provider/usage ----------------------------------------------------------------

    async def usage(self, params: protocol.MaintenanceParams) -> m.UsageReport:
        return m.UsageReport(supported=True, usage=await self._usage())

    async def _usage(self) -> m.UsageOk | m.UsageNotInstalled | m.UsageUnauthenticated | m.UsageExpired | m.UsageError:
        if await self.which() is None:
            return m.UsageNotInstalled()
        creds = await self.credentials()
        if creds is None:
            return m.UsageUnauthenticated()
        if _login_status(creds) == "expired":
            return m.UsageExpired()
        email = await self.account_email()
        plan = creds.plan_label
        try:
            headers = {"Authorization": f"Bearer {creds.token}", **USAGE_HEADERS}
            response = await trio.to_thread.run_sync(http_get, self.usage_url, headers, self.opener)
            status = response.status
            if status == 401:
                return m.UsageExpired()
            if not 200 <= status < 300:
                failed = RATE_LIMITED if status == 429 else f"Claude usage request failed (HTTP {status})."
                return m.UsageError(message=failed, planLabel=plan, accountEmail=email)
            return m.UsageOk(accountEmail=email, planLabel=plan, windows=usage_windows(response.body))
        except Exception as exc:
            return m.UsageError(message=error_text(exc), planLabel=plan, accountEmail=email)

    # -- provider/installation/* -------------------------------------------------------

    async def installation_status(self, params: protocol.InstallationStatusParams) -> m.InstallationStatus:
        """The install facts, from the CLI, its `doctor` and npm probed side by side."""
        command = self.command
        doctor = partial(self.run, [command, "doctor"], INSTALL_CHECK_TIMEOUT_S)
        tags = partial(self.run, ["npm", "view", NPM_PACKAGE, "dist-tags", "--json"], INSTALL_CHECK_TIMEOUT_S)
        found = await cli_probes.probe_installation(command, NPM_PACKAGE, self.env, {"doctor": doctor, "tags": tags})
        latest = latest_version(found.more["doctor"], found.more["tags"])
        needs_update = older(found.current, latest)
        action: tuple[Literal["install", "update"], str] | None = None
        if not found.installed:
            action = ("install", INSTALL_SCRIPT)
        elif needs_update and (found.source == "npmGlobal" or self._self_updating(found.path)):
            action = ("update", display_command([command, "update"]))
        return found.status(latest=latest, minimum=None, action=action, needs_update=needs_update, unsupported=False)

    def _self_updating(self, path: str | None) -> bool:
        """A native install (under `~/.local/share/claude`) or the default `~/.local/bin/claude` updates itself."""
        if path is None:
            return False
        native = os.path.join(self.home, ".local", "share", "claude") + os.sep
        return path == os.path.join(self.home, ".local", "bin", "claude") or os.path.realpath(path).startswith(native)

    async def installation_run(self, params: protocol.InstallationRunParams) -> m.InstallUnavailable | m.InstallPlan:
        """The plan for the action the fresh status offers; the daemon runs it and verifies with the status."""
        status = await self.installation_status(protocol.InstallationStatusParams(providerId=params.providerId))
        argv = {"install": ("sh", "-c", INSTALL_SCRIPT), "update": (status.executableName, "update")}
        return cli_probes.install_plan(status, params.action, "Claude Code", argv)


def _login_status(creds: Credentials | None) -> HealthStatus:
    if creds is None:
        return "unauthenticated"
    if creds.expires_at_ms is not None and creds.expires_at_ms <= time.time() * 1000:
        return "expired"
    return "ready"

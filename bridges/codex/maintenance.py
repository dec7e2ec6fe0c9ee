"""The maintenance methods (spec §2.3): health, usage and installation of the Codex CLI on this host.

They are host probes the runtime's account and install screens call, never an app-server child: each one looks
at the CLI (`which`, `--version`), npm, the login in `<codex home>/auth.json` and ChatGPT's usage endpoint
afresh. The shared mechanics (bounded probes, npm, versions, JWTs) are `bbridge.kit.cli_probes`; blocking work runs in
trio's worker threads or as the kit's one-shot commands, so sessions keep streaming meanwhile.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import Message
from functools import partial
from typing import Any, Literal

import trio

from bbridge.core import js
from bbridge.kit import cli_probes
from bbridge.kit.cli_probes import INSTALL_CHECK_TIMEOUT_S, HealthStatus
from bbridge.wire import maintenance as m
from bbridge.wire import protocol

COMMAND = "codex"
MINIMUM_VERSION = "0.136.0"
REQUIRED_VERSIONS = {"thread_rewind": "0.143.0"}
NPM_PACKAGE = "@openai/codex"
NPM_INSTALL = ("npm", "install", "-g", f"{NPM_PACKAGE}@latest")
CODEX_UPDATE = (COMMAND, "update")
LOGIN_COMMAND = "codex login"
USAGE_URL = "https://chatgpt.com/backend-api/wham/usage"
USAGE_HEADERS = {"originator": "bb", "User-Agent": "bb-provider-codex", "Accept": "application/json"}
AUTH_CLAIMS = "https://api.openai.com/auth"
PROFILE_CLAIMS = "https://api.openai.com/profile"
API_KEY_USAGE = "Codex is authenticated with an API key, which has no subscription usage limits."
MALFORMED = "Codex usage response was malformed."
CLOUDFLARE_COOKIES = frozenset(
    {
        "__cf_bm",
        "__cflb",
        "__cfruid",
        "__cfseq",
        "__cfwaitingroom",
        "_cfuvid",
        "cf_clearance",
        "cf_ob_info",
        "cf_use_ob",
    }
)
WEEK_S = 604_800
PLAN_LABELS = {
    "free": "Free",
    "go": "Go",
    "plus": "Plus",
    "pro": "Pro",
    "team": "Team",
    "business": "Business",
    "education": "Education",
    "edu": "Education",
    "enterprise": "Enterprise",
}
UsageResult = m.UsageOk | m.UsageNotInstalled | m.UsageUnauthenticated | m.UsageExpired | m.UsageError


@dataclass(frozen=True, slots=True)
class Credentials:
    """The CLI's stored login: an API key (`account_id` None), or ChatGPT tokens as health and usage need them."""

    token: str
    account_id: str | None = None
    email: str | None = None
    expired: bool = False
    fedramp: bool = False

    @property
    def api_key(self) -> bool:
        return self.account_id is None


def credentials_from(document: Any, now_s: float) -> Credentials | None:
    """The login in a parsed `auth.json`; None when it holds no usable API key or ChatGPT account."""
    if not isinstance(document, dict):
        return None
    mode, key = document.get("auth_mode"), document.get("OPENAI_API_KEY")
    if mode in ("apikey", "apiKey") or (mode is None and isinstance(key, str) and key):
        return Credentials(key) if isinstance(key, str) and key else None
    tokens = _object(document.get("tokens"))
    access = _first_str([tokens.get("access_token")])
    if access is None:
        return None
    payloads = [cli_probes.jwt_payload(access), cli_probes.jwt_payload(tokens.get("id_token"))]
    claims = [_object(p.get(AUTH_CLAIMS)) for p in payloads]
    account = _first_str([tokens.get("account_id"), *(c.get("chatgpt_account_id") for c in claims)])
    if account is None:
        return None
    emails = [e for p in payloads for e in (p.get("email"), _object(p.get(PROFILE_CLAIMS)).get("email"))]
    exp = payloads[0].get("exp")
    return Credentials(
        token=access,
        account_id=account,
        email=_first_str(emails),
        expired=isinstance(exp, int | float) and exp <= now_s,
        fedramp=any(c.get("chatgpt_account_is_fedramp") is True for c in claims),
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _first_str(values: list[Any]) -> str | None:
    return next((v for v in values if isinstance(v, str) and v), None)


def plan_label(plan_type: str | None) -> str | None:
    if not plan_type:
        return None
    return PLAN_LABELS.get(plan_type, plan_type[0].upper() + plan_type[1:])


def _optional(value: Any, kind: type | tuple[type, ...]) -> bool:
    return value is None or (isinstance(value, kind) and not isinstance(value, bool))


def usage_ok(body: bytes, email: str | None) -> m.UsageOk:
    """The `ok` answer of a 2xx usage body; ValueError(MALFORMED) when it is not the expected shape."""
    document = cli_probes.json_or_none(body)
    if not isinstance(document, dict) or not _optional(document.get("plan_type"), str):
        raise ValueError(MALFORMED)
    limits = document.get("rate_limit")
    if not _optional(limits, dict):
        raise ValueError(MALFORMED)
    windows = []
    for key, label in (("primary_window", "Current session"), ("secondary_window", "Weekly limit")):
        entry = limits.get(key) if isinstance(limits, dict) else None
        if entry is not None:
            windows.append(_window(entry, label))
    return m.UsageOk(accountEmail=email, planLabel=plan_label(document.get("plan_type")), windows=windows)


def _window(entry: Any, label: str) -> m.UsageWindow:
    """One rate-limit window; a week-long one is the weekly limit whichever slot it came in."""
    numbers = ("used_percent", "limit_window_seconds", "reset_at")
    if not isinstance(entry, dict) or not all(_optional(entry.get(n), (int, float)) for n in numbers):
        raise ValueError(MALFORMED)
    used, reset = entry.get("used_percent"), entry.get("reset_at")
    return m.UsageWindow(
        label="Weekly limit" if entry.get("limit_window_seconds") == WEEK_S else label,
        usedPercent=cli_probes.percent(float(used)) if used is not None else 0,
        resetsAt=cli_probes.iso_utc(reset) if reset is not None else None,
    )


def retained_cookies(headers: Message) -> dict[str, str]:
    """The Cloudflare cookies a response sets (`Set-Cookie`), the only ones the usage fetch replays."""
    kept: dict[str, str] = {}
    for header in headers.get_all("Set-Cookie") or []:
        name, _, value = header.split(";", 1)[0].partition("=")
        name = name.strip()
        if name in CLOUDFLARE_COOKIES or name.startswith("cf_chl_"):
            kept[name] = value.strip()
    return kept


def update_argv(source: str) -> tuple[str, ...]:
    """npm updates what npm installed (as it installs); any other install is asked to update itself."""
    return NPM_INSTALL if source == "npmGlobal" else CODEX_UPDATE


class Maintenance:
    """The four maintenance handlers over one host environment (the bridge's: maintenance has no session).

    The Cloudflare cookies the usage endpoint hands out are kept for the process, as a browser would keep them.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        usage_url: str = USAGE_URL,
        codex_home: str | None = None,
        clock: Callable[[], float] = time.time,
        opener: urllib.request.OpenerDirector | None = None,
    ) -> None:
        self.env = dict(env)
        self.usage_url = usage_url
        self.codex_home = codex_home if codex_home is not None else self._default_home()
        self.clock = clock
        self.opener = opener if opener is not None else urllib.request.build_opener()
        self.cookies: dict[str, str] = {}

    def _default_home(self) -> str:
        """`$CODEX_HOME` trimmed, else `~/.codex` (HOME first, as Node's `os.homedir()`)."""
        home = js.trim(self.env.get("CODEX_HOME", ""))
        return home or os.path.join(self.env.get("HOME") or os.path.expanduser("~"), ".codex")

    # -- probes ------------------------------------------------------------------------

    async def which(self) -> str | None:
        return await cli_probes.which(COMMAND, self.env)

    async def version(self) -> str | None:
        return await cli_probes.version(COMMAND, self.env)

    async def credentials(self) -> Credentials | None:
        """The login in `auth.json`: a missing file is no login; an unreadable or non-JSON one raises."""
        path = os.path.join(self.codex_home, "auth.json")

        def read() -> bytes | None:
            try:
                with open(path, "rb") as file:
                    return file.read()
            except FileNotFoundError:
                return None

        text = await trio.to_thread.run_sync(read)
        return credentials_from(js.parse(text), self.clock()) if text is not None else None

    # -- provider/health ---------------------------------------------------------------

    async def health(self, params: protocol.MaintenanceParams) -> m.HealthReport:
        if await self.which() is None:
            return self._report("not_installed")
        version = await self.version()
        if cli_probes.older(version, MINIMUM_VERSION):
            return self._report("unsupported_version", version=version)
        try:
            creds = await self.credentials()
        except Exception as exc:
            return self._report("unknown", version=version, message=cli_probes.error_text(exc))
        if creds is None:
            return self._report("unauthenticated", version=version)
        return self._report("expired" if creds.expired else "ready", version=version, email=creds.email)

    def _report(self, status: HealthStatus, **members: str | None) -> m.HealthReport:
        health = cli_probes.health(status, login_command=LOGIN_COMMAND, minimum=MINIMUM_VERSION, **members)
        return m.HealthReport(supported=True, health=health)

    # -- provider/usage ----------------------------------------------------------------

    async def usage(self, params: protocol.MaintenanceParams) -> m.UsageReport:
        return m.UsageReport(supported=True, usage=await self._usage())

    async def _usage(self) -> UsageResult:
        if await self.which() is None:
            return m.UsageNotInstalled()
        try:
            creds = await self.credentials()
        except Exception as exc:
            return m.UsageError(message=cli_probes.error_text(exc))
        if creds is None:
            return m.UsageUnauthenticated()
        if creds.api_key:
            return m.UsageError(message=API_KEY_USAGE)
        if creds.expired:
            return m.UsageExpired()
        try:
            response = await self._fetch(creds)
            if response.status == 401:
                return m.UsageExpired()
            if not 200 <= response.status < 300:
                return m.UsageError(message=f"Codex usage request failed (HTTP {response.status}).")
            return usage_ok(response.body, creds.email)
        except Exception as exc:
            return m.UsageError(message=cli_probes.error_text(exc))

    async def _fetch(self, creds: Credentials) -> cli_probes.Response:
        """The usage GET, once more after a Cloudflare challenge (whose answer set the clearance cookies)."""
        assert creds.account_id is not None
        headers = {"Authorization": f"Bearer {creds.token}", "chatgpt-account-id": creds.account_id, **USAGE_HEADERS}
        if creds.fedramp:
            headers["X-OpenAI-Fedramp"] = "true"
        response = await self._get(headers)
        if response.status == 403 and response.headers.get("cf-mitigated") == "challenge":
            response = await self._get(headers)
        return response

    async def _get(self, headers: dict[str, str]) -> cli_probes.Response:
        """One GET replaying the retained Cloudflare cookies and retaining the ones it is given."""
        if self.cookies:
            headers = headers | {"Cookie": "; ".join(f"{name}={value}" for name, value in self.cookies.items())}
        response = await trio.to_thread.run_sync(cli_probes.http_get, self.usage_url, headers, self.opener)
        self.cookies |= retained_cookies(response.headers)
        return response

    # -- provider/installation/* -------------------------------------------------------

    async def installation_status(self, params: protocol.InstallationStatusParams) -> m.InstallationStatus:
        """The install facts, from the CLI and npm probed side by side."""
        requirement = params.requirement if isinstance(params.requirement, str) else None
        latest_probe = partial(
            cli_probes.run_probe, ["npm", "view", NPM_PACKAGE, "version"], self.env, INSTALL_CHECK_TIMEOUT_S
        )
        found = await cli_probes.probe_installation(COMMAND, NPM_PACKAGE, self.env, {"latest": latest_probe})
        latest = cli_probes.parse_version(found.more["latest"] or "")
        minimum = REQUIRED_VERSIONS[requirement] if requirement is not None else MINIMUM_VERSION
        current, installed = found.current, found.installed
        needs_update = installed and cli_probes.older(current, latest)
        unsupported = installed and (requirement is not None if current is None else cli_probes.older(current, minimum))
        action: tuple[Literal["install", "update"], str] | None = None
        if not installed:
            action = ("install", cli_probes.display_command(NPM_INSTALL))
        elif needs_update or unsupported:
            action = ("update", cli_probes.display_command(update_argv(found.source)))
        return found.status(
            latest=latest, minimum=minimum, action=action, needs_update=needs_update, unsupported=unsupported
        )

    async def installation_run(self, params: protocol.InstallationRunParams) -> m.InstallUnavailable | m.InstallPlan:
        """The plan for the action the fresh status offers; the daemon runs it and verifies with the status."""
        status = await self.installation_status(protocol.InstallationStatusParams(providerId=params.providerId))
        argv = {"install": NPM_INSTALL, "update": update_argv(status.installSource)}
        return cli_probes.install_plan(status, params.action, "Codex", argv)

"""Host probes of a provider CLI's installation, the ones both CLI bridges' maintenance methods share
(claude-code-bridge.md §3.3, codex-bridge.md §2.3).

Health, usage and installation answers look at the host afresh: the CLI on PATH and its `--version`, npm's
global prefix and listing, a stored login's JWTs, an HTTP usage endpoint. The mechanics are the same for every
provider, so they live here once, up to the installation status and run answers; what differs (package,
credentials, endpoint, labels, the latest version, which action is offered) stays in each bridge.
A probe that fails or times out reads as "no output", so a broken host degrades a screen instead of failing it.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from functools import partial
from typing import Any, Literal

import msgspec
import trio

from bbridge.core import js
from bbridge.kit.child import run_once
from bbridge.wire import maintenance as m

PROBE_TIMEOUT_S = 5.0  # `which` / `--version`
INSTALL_CHECK_TIMEOUT_S = 15.0  # npm and the other installation probes
USAGE_TIMEOUT_S = 15.0
_VERSION = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?")
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./:@+-]+")


# -- versions --------------------------------------------------------------------------


def parse_version(text: str) -> str | None:
    """The first `X.Y.Z(-pre)` token (a leading `v` is not part of it)."""
    match = _VERSION.search(text)
    return match.group(0) if match else None


def older(current: str | None, latest: str | None) -> bool:
    """Whether `current` precedes `latest`: numbers first, then a release beats a pre-release, pre-releases
    compare as strings; anything unknown or unparsable never precedes."""
    keys = []
    for version in (current, latest):
        if version is None or not _VERSION.fullmatch(version):
            return False
        numbers, _, pre = version.partition("-")
        keys.append((tuple(int(n) for n in numbers.split(".")), not pre, pre))
    return keys[0] < keys[1]


# -- commands --------------------------------------------------------------------------


async def run_probe(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> str | None:
    """A command's stdout+stderr; None when it cannot start, fails or outlives `timeout` (then it is killed)."""
    try:
        done = await run_once(argv, env=env, timeout=timeout)
    except OSError:
        return None
    if done is None or done.returncode != 0:
        return None
    return (done.stdout + done.stderr).decode(errors="replace")


async def concurrently(jobs: Mapping[str, Callable[[], Awaitable[str | None]]]) -> dict[str, str | None]:
    """Every probe's output by name, the probes run side by side so an installation status stays inside the
    runtime's 30 s however many of them time out."""
    outputs: dict[str, str | None] = {}

    async def job(name: str, probe: Callable[[], Awaitable[str | None]]) -> None:
        outputs[name] = await probe()

    async with trio.open_nursery() as nursery:
        for name, probe in jobs.items():
            nursery.start_soon(job, name, probe)
    return outputs


async def which(command: str, env: Mapping[str, str]) -> str | None:
    """`which <command>` against the bridge's PATH (not the daemon's), bounded like any probe."""
    with trio.move_on_after(PROBE_TIMEOUT_S):
        return await trio.to_thread.run_sync(
            lambda: shutil.which(command, path=env.get("PATH", "")), abandon_on_cancel=True
        )
    return None


def display_command(argv: Sequence[str]) -> str:
    """A command for people to read: arguments POSIX-quoted only when they hold characters outside the
    shell-safe set (`[A-Za-z0-9_./:@+-]`; narrower than `shlex`'s, as the reference's)."""
    return " ".join(arg if _SHELL_SAFE.fullmatch(arg) else "'" + arg.replace("'", "'\"'\"'") + "'" for arg in argv)


# -- npm -------------------------------------------------------------------------------


InstallSource = Literal["notInstalled", "npmGlobal", "external"]


def install_source(path: str | None, installed: bool, prefix_output: str | None) -> InstallSource:
    """`npmGlobal` when the executable `which` found sits in `<npm prefix -g>/bin`, else who else installed it."""
    prefix = (prefix_output or "").strip()
    if path is not None and prefix and os.path.dirname(path) == os.path.join(prefix, "bin"):
        return "npmGlobal"
    return "external" if installed else "notInstalled"


def npm_global_version(listing_text: str | None, package: str) -> str | None:
    """The package's version in `npm list -g <package> --json`, when npm installed it globally."""
    listing = json_or_none(listing_text)
    dependencies = listing.get("dependencies") if isinstance(listing, dict) else None
    entry = dependencies.get(package) if isinstance(dependencies, dict) else None
    version = entry.get("version") if isinstance(entry, dict) else None
    return version if isinstance(version, str) and version else None


# -- answers ---------------------------------------------------------------------------


HealthStatus = Literal["ready", "not_installed", "unauthenticated", "expired", "unsupported_version", "unknown"]


def health(
    status: HealthStatus,
    *,
    login_command: str,
    minimum: str | None = None,
    message: str | None = None,
    email: str | None = None,
    plan: str | None = None,
    version: str | None = None,
) -> m.Health:
    """A `provider/health` answer: any installed CLI can be updated, and installing is always offered."""
    return m.Health(
        status=status,
        statusMessage=message,
        accountEmail=email,
        planLabel=plan,
        installedVersion=version,
        minimumSupportedVersion=minimum,
        canInstall=True,
        canUpdate=status != "not_installed",
        loginCommand=login_command,
    )


@dataclass(frozen=True, slots=True)
class Installation:
    """What the installation probes found of a CLI npm can install globally: the executable `which` finds, its
    `--version` (`installed` when either answered, as both specs say), where it came from, npm's listing, and the
    bridge's own probes by name (`more`: the latest version is each provider's own question)."""

    command: str
    package: str
    path: str | None
    installed: bool
    current: str | None
    source: InstallSource
    npm_listing: str | None
    more: dict[str, str | None]

    def status(
        self,
        *,
        latest: str | None,
        minimum: str | None,
        action: tuple[Literal["install", "update"], str] | None,
        needs_update: bool,
        unsupported: bool,
    ) -> m.InstallationStatus:
        """The `provider/installation/status` answer; `action` is the offered kind with its display command."""
        offered = None
        if action is not None:
            kind, command = action
            offered = m.InstallAction(kind=kind, label="Install" if kind == "install" else "Update", command=command)
        return m.InstallationStatus(
            executableName=self.command,
            executablePath=self.path,
            installed=self.installed,
            installSource=self.source,
            currentVersion=self.current,
            latestVersion=latest,
            minimumSupportedVersion=minimum,
            npmPackageName=self.package,
            npmGlobalPackageVersion=npm_global_version(self.npm_listing, self.package),
            installAction=offered,
            needsUpdate=needs_update,
            versionUnsupported=unsupported,
        )


async def probe_installation(
    command: str, package: str, env: Mapping[str, str], more: Mapping[str, Callable[[], Awaitable[str | None]]]
) -> Installation:
    """`which`, `--version`, `npm prefix -g` and `npm list -g <package>` with the bridge's `more`, side by side."""
    outputs = await concurrently(
        {
            "path": partial(which, command, env),
            "version": partial(run_probe, [command, "--version"], env, PROBE_TIMEOUT_S),
            "prefix": partial(run_probe, ["npm", "prefix", "-g"], env, INSTALL_CHECK_TIMEOUT_S),
            "global": partial(
                run_probe, ["npm", "list", "-g", package, "--depth=0", "--json"], env, INSTALL_CHECK_TIMEOUT_S
            ),
            **more,
        }
    )
    path, ran = outputs.pop("path"), outputs.pop("version")
    installed = path is not None or ran is not None
    return Installation(
        command=command,
        package=package,
        path=path,
        installed=installed,
        current=parse_version(ran) if ran is not None else None,
        source=install_source(path, installed, outputs.pop("prefix")),
        npm_listing=outputs.pop("global"),
        more=outputs,
    )


async def version(command: str, env: Mapping[str, str]) -> str | None:
    """The CLI's version as its `--version` prints it; None when the probe fails or prints none."""
    output = await run_probe([command, "--version"], env, PROBE_TIMEOUT_S)
    return parse_version(output) if output is not None else None


def install_plan(
    status: m.InstallationStatus,
    requested: Literal["install", "update"],
    provider: str,
    argv: Mapping[str, Sequence[str]],
) -> m.InstallUnavailable | m.InstallPlan:
    """The `provider/installation/run` answer for the action a fresh `status` offers, run as `argv[kind]`; an
    update is verified against the latest version when known, else as any change of the current one."""
    action = status.installAction
    if action is None or action.kind != requested:
        message = f"{provider} {requested} is no longer available on this host."
        return m.InstallUnavailable(available=False, message=message)
    run = argv[action.kind]
    command = m.InstallCommand(command=run[0], args=list(run[1:]), displayCommand=action.command)
    verification: m.VerifyInstalled | m.VerifyVersionChanged | m.VerifyVersionAtLeast
    if action.kind == "install":
        verification = m.VerifyInstalled()
    elif status.latestVersion is not None:
        verification = m.VerifyVersionAtLeast(version=status.latestVersion)
    else:
        verification = m.VerifyVersionChanged(previousVersion=status.currentVersion or "unknown")
    return m.InstallPlan(available=True, command=command, verification=verification)


# -- values ----------------------------------------------------------------------------


def json_or_none(text: str | bytes | None) -> Any:
    """`JSON.parse` of a probe's output; None for no output or output that is not JSON."""
    try:
        return js.parse(text) if text is not None else None
    except msgspec.DecodeError:
        return None


def percent(value: float) -> int:
    """A usage percentage: JavaScript's `Math.round` (halves up, where Python's `round` goes to even), clamped
    to 0..100; a non-finite figure reads as 0."""
    return max(0, min(100, math.floor(value + 0.5))) if math.isfinite(value) else 0


def iso_utc(seconds: float) -> str:
    """`new Date(seconds * 1000).toISOString()`: UTC with milliseconds and a `Z`."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def jwt_payload(token: str | None) -> dict[str, Any]:
    """The claims of a JWT (its base64url middle segment) without verifying it: the CLI's own login file is
    trusted; anything undecodable reads as no claims."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) < 2:
        return {}
    try:
        payload = js.parse(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, msgspec.DecodeError):
        return {}
    return payload if isinstance(payload, dict) else {}


def error_text(exc: BaseException) -> str:
    """An exception as a message the runtime may show: never empty (a bare exception is named by its type)."""
    text = str(exc.reason) if isinstance(exc, urllib.error.URLError) else str(exc)
    return text or type(exc).__name__


# -- HTTP ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Message
    body: bytes


def http_get(url: str, headers: Mapping[str, str], opener: urllib.request.OpenerDirector) -> Response:
    """A GET bounded by the usage timeout (blocking: run it in a worker thread); a non-2xx answer is returned,
    not raised, so callers map statuses themselves."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with opener.open(request, timeout=USAGE_TIMEOUT_S) as response:
            return Response(response.status, response.headers, response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return Response(exc.code, exc.headers, exc.read())

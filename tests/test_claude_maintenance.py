"""The Claude Code bridge's maintenance methods (spec §3.3) against a fake host.

The host is a temporary PATH holding fake `claude`, `npm` and `security` scripts whose answers come from `FAKE_*`
variables in the bridge's environment, a temporary HOME with the CLI's credential files, and a stdlib HTTP server
on 127.0.0.1 standing in for the usage endpoint: no test touches the network or the real user's files.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest

from bbridge.kit import cli_probes
from bbridge.wire import protocol
from bridges.claude_code import launch
from bridges.claude_code import maintenance as mt
from tests.host_probes import closed_port, health_answer, script, status_answer
from tests.support import INIT, HttpEndpoint, http_endpoint, spawned

FAKE_CLAUDE = r"""
import os, sys, time
time.sleep(float(os.environ.get("FAKE_CLAUDE_SLEEP", "0")))
if os.environ.get("FAKE_CLAUDE_FAIL"):
    sys.exit(1)
if sys.argv[1:] == ["--version"]:
    print(os.environ.get("FAKE_CLAUDE_VERSION", "2.1.238") + " (Claude Code)")
elif sys.argv[1:] == ["doctor"]:
    print("Diagnostics\n └ Auto-update channel: " + os.environ.get("FAKE_CLAUDE_CHANNEL", "latest"))
"""
FAKE_NPM = r"""
import json, os, sys
args = sys.argv[1:]
if args == ["prefix", "-g"]:
    print(os.environ.get("FAKE_NPM_PREFIX", "/nonexistent/npm"))
elif args[:2] == ["list", "-g"] and "--json" in args and "FAKE_NPM_GLOBAL" in os.environ:
    print(json.dumps({"dependencies": {"@anthropic-ai/claude-code": {"version": os.environ["FAKE_NPM_GLOBAL"]}}}))
elif args == ["view", "@anthropic-ai/claude-code", "dist-tags", "--json"]:
    print(json.dumps({"latest": "2.1.240", "stable": "2.1.230", "next": "2.2.0-beta.1"}))
else:
    sys.exit(1)
"""
FAKE_SECURITY = r"""
import os, sys
if sys.argv[1:] != ["find-generic-password", "-s", "Claude Code-credentials", "-w"] or "FAKE_KEYCHAIN" not in os.environ:
    sys.exit(44)
print(os.environ["FAKE_KEYCHAIN"])
"""
PARAMS = protocol.MaintenanceParams(providerId="claude-code")
STATUS_PARAMS = protocol.InstallationStatusParams(providerId="claude-code")
FUTURE_MS = (time.time() + 3600) * 1000
PAST_MS = (time.time() - 3600) * 1000
HEALTH_ORDER = [
    "status", "statusMessage", "accountEmail", "planLabel", "installedVersion", "minimumSupportedVersion",
    "canInstall", "canUpdate", "loginCommand",
]  # fmt: skip


def oauth(**members: Any) -> str:
    return json.dumps({"claudeAiOauth": {"accessToken": "tok-1", **members}})


@dataclass
class Host:
    """A fake machine: `bin` is the whole PATH, `home` is HOME; `env` is what the bridge would inherit."""

    root: Path
    bin: Path
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    def claude(self, where: Path | None = None) -> Path:
        return script(where or self.bin / "claude", FAKE_CLAUDE)

    def login(self, credentials: str, email: str | None = "ada@example.com") -> None:
        (self.home / ".claude").mkdir(exist_ok=True)
        (self.home / ".claude" / ".credentials.json").write_text(credentials)
        if email is not None:
            (self.home / ".claude.json").write_text(json.dumps({"oauthAccount": {"emailAddress": email}}))

    def maintenance(self, **kwargs: Any) -> mt.Maintenance:
        return mt.Maintenance(self.env, **kwargs)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    found = Host(tmp_path, tmp_path / "bin", tmp_path / "home")
    found.bin.mkdir()
    found.home.mkdir()
    script(found.bin / "npm", FAKE_NPM)
    found.env = {"PATH": str(found.bin), "HOME": str(found.home)}
    return found


def health_of(status: str, **members: Any) -> dict[str, Any]:
    return health_answer(status, login_command="claude /login", **members)


async def health(host: Host, **kwargs: Any) -> dict[str, Any]:
    report = msgspec.to_builtins(await host.maintenance(**kwargs).health(PARAMS))
    assert report["supported"] is True
    result: dict[str, Any] = report["health"]
    return result


# -- provider/health -----------------------------------------------------------------------


async def test_health_without_the_cli_is_not_installed(host: Host) -> None:
    assert await health(host) == health_of("not_installed")


async def test_health_without_credentials_is_unauthenticated(host: Host) -> None:
    host.claude()
    assert await health(host) == health_of("unauthenticated", installedVersion="2.1.238")


@pytest.mark.parametrize("stored", ["{not json", "[]", json.dumps({"claudeAiOauth": {"accessToken": ""}})])
async def test_unusable_credentials_read_as_none(host: Host, stored: str) -> None:
    host.claude()
    host.login(stored)
    assert (await health(host))["status"] == "unauthenticated"


async def test_health_with_a_lapsed_token_is_expired(host: Host) -> None:
    host.claude()
    host.login(oauth(expiresAt=PAST_MS, subscriptionType="pro"))
    expected = health_of("expired", accountEmail="ada@example.com", planLabel="Pro", installedVersion="2.1.238")
    assert await health(host) == expected


async def test_health_ready_with_account_and_max_plan(host: Host) -> None:
    host.claude()
    host.env["FAKE_CLAUDE_VERSION"] = "2.2.0-beta.3"
    host.login(oauth(expiresAt=FUTURE_MS, subscriptionType="max", rateLimitTier="default_claude_max_5x"))
    expected = health_of("ready", accountEmail="ada@example.com", planLabel="Max (5x)", installedVersion="2.2.0-beta.3")
    assert await health(host) == expected


async def test_a_token_without_expiry_is_ready_and_a_broken_account_file_has_no_email(host: Host) -> None:
    host.claude()
    host.login(oauth(), email=None)
    (host.home / ".claude.json").write_text("{")
    assert await health(host) == health_of("ready", installedVersion="2.1.238")


@pytest.mark.parametrize(
    ("members", "label"),
    [
        ({"rateLimitTier": "default_claude_max_20x", "subscriptionType": "max"}, "Max (20x)"),
        ({"rateLimitTier": "default_claude_pro", "subscriptionType": "team"}, "Team"),
        ({"subscriptionType": ""}, None),
        ({}, None),
    ],
)
def test_plan_label(members: dict[str, Any], label: str | None) -> None:
    assert mt.plan_label(members) == label


async def test_the_executable_override_is_trimmed_and_probed(host: Host) -> None:
    elsewhere = host.claude(host.root / "opt" / "claude")
    host.env[launch.EXECUTABLE_ENV] = f"  {elsewhere}\n"
    assert (await health(host))["installedVersion"] == "2.1.238"


async def test_a_failing_or_slow_version_probe_reads_as_no_version(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    host.claude()
    host.env["FAKE_CLAUDE_FAIL"] = "1"
    assert (await health(host))["installedVersion"] is None
    del host.env["FAKE_CLAUDE_FAIL"]
    host.env["FAKE_CLAUDE_VERSION"] = "dev build"
    assert (await health(host))["installedVersion"] is None
    monkeypatch.setattr(cli_probes, "PROBE_TIMEOUT_S", 0.2)
    host.env["FAKE_CLAUDE_SLEEP"] = "5"
    started = time.monotonic()
    assert (await health(host))["installedVersion"] is None
    assert time.monotonic() - started < 3  # the probe was killed at its timeout, not waited for


async def test_on_macos_the_keychain_comes_before_the_file(host: Host) -> None:
    host.claude()
    script(host.bin / "security", FAKE_SECURITY)
    host.login(oauth(subscriptionType="pro"))
    host.env["FAKE_KEYCHAIN"] = oauth(rateLimitTier="default_claude_max_5x")
    assert (await health(host, platform="darwin"))["planLabel"] == "Max (5x)"
    del host.env["FAKE_KEYCHAIN"]  # no keychain item: the file answers
    assert (await health(host, platform="darwin"))["planLabel"] == "Pro"
    host.env["FAKE_KEYCHAIN"] = oauth(rateLimitTier="default_claude_max_5x")  # other platforms never ask it
    assert (await health(host, platform="linux"))["planLabel"] == "Pro"


@pytest.mark.parametrize(
    ("error", "message"), [(RuntimeError("disk on fire"), "disk on fire"), (KeyError(), "KeyError")]
)
async def test_an_unexpected_failure_is_unknown_with_its_text(
    host: Host, monkeypatch: pytest.MonkeyPatch, error: Exception, message: str
) -> None:
    """A failure without text is named by its type: `statusMessage` is never empty."""

    async def broken(self: mt.Maintenance) -> str | None:
        raise error

    monkeypatch.setattr(mt.Maintenance, "which", broken)
    assert await health(host) == health_of("unknown", statusMessage=message)


# -- provider/usage ------------------------------------------------------------------------


@pytest.fixture
def usage_server() -> Iterator[HttpEndpoint]:
    with http_endpoint("/api/oauth/usage") as server:
        yield server


async def usage(host: Host, url: str) -> dict[str, Any]:
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    report = msgspec.to_builtins(await host.maintenance(usage_url=url, opener=no_proxy).usage(PARAMS))
    assert report["supported"] is True
    result: dict[str, Any] = report["usage"]
    return result


def logged_in(host: Host) -> None:
    host.claude()
    host.login(oauth(expiresAt=FUTURE_MS, rateLimitTier="default_claude_max_5x"))


ERROR_ACCOUNT = {"planLabel": "Max (5x)", "accountEmail": "ada@example.com"}


async def test_usage_before_any_request_not_installed_unauthenticated_expired(
    host: Host, usage_server: HttpEndpoint
) -> None:
    assert await usage(host, usage_server.url) == {"status": "not_installed"}
    host.claude()
    assert await usage(host, usage_server.url) == {"status": "unauthenticated"}
    host.login(oauth(expiresAt=PAST_MS))
    assert await usage(host, usage_server.url) == {"status": "expired"}
    assert usage_server.requests == []


async def test_usage_ok_reports_the_windows(host: Host, usage_server: HttpEndpoint) -> None:
    logged_in(host)
    body = {
        "five_hour": {"utilization": 27.5, "resets_at": "2027-01-15T10:00:00Z"},
        "seven_day": {"utilization": 100.4, "resets_at": None},
        "seven_day_opus": {"utilization": 10},
        "limits": [
            {"kind": "session", "percent": 27.5},
            {"kind": "weekly_scoped", "percent": 95, "resets_at": "2027-01-16T00:00:00Z",
             "scope": {"model": {"display_name": "Fable"}}},
            {"kind": "weekly_scoped", "percent": 50, "scope": {"model": {"display_name": "Fable"}}},
            {"kind": "weekly_scoped", "percent": -3, "scope": {"model": {"display_name": "Opus"}}},
            {"kind": "weekly_scoped", "percent": 50, "scope": {"model": {"id": "x"}}},
            {"kind": "weekly_scoped", "percent": None, "scope": {"model": {"display_name": "Ghost"}}},
            "junk",
        ],
    }  # fmt: skip
    usage_server.reply(200, json.dumps(body).encode())
    assert await usage(host, usage_server.url) == {
        "status": "ok",
        "accountEmail": "ada@example.com",
        "planLabel": "Max (5x)",
        "windows": [
            {"label": "Current session", "usedPercent": 28, "resetsAt": "2027-01-15T10:00:00Z"},
            {"label": "Weekly limit", "usedPercent": 100, "resetsAt": None},
            {"label": "Fable", "usedPercent": 95, "resetsAt": "2027-01-16T00:00:00Z"},
            {"label": "Opus", "usedPercent": 0, "resetsAt": None},
        ],
    }
    (sent,) = usage_server.requests
    assert sent["path"] == "/api/oauth/usage"
    assert sent["authorization"] == "Bearer tok-1"
    assert (sent["accept"], sent["content-type"]) == ("application/json", "application/json")
    assert (sent["anthropic-beta"], sent["user-agent"]) == ("oauth-2025-04-20", "claude-code/2.1.0")


async def test_usage_ok_with_no_windows(host: Host, usage_server: HttpEndpoint) -> None:
    logged_in(host)
    usage_server.reply(200, b'{"five_hour": null}')
    assert (await usage(host, usage_server.url))["windows"] == []


async def test_usage_401_means_the_login_expired(host: Host, usage_server: HttpEndpoint) -> None:
    logged_in(host)
    usage_server.reply(401, b'{"error": "token expired"}')
    assert await usage(host, usage_server.url) == {"status": "expired"}


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (429, "Claude usage is rate limited right now. Try again shortly."),
        (500, "Claude usage request failed (HTTP 500)."),
        (404, "Claude usage request failed (HTTP 404)."),
    ],
)
async def test_usage_other_failures_are_errors_with_the_account(
    host: Host, usage_server: HttpEndpoint, status: int, message: str
) -> None:
    logged_in(host)
    usage_server.reply(status, b"")
    assert await usage(host, usage_server.url) == {"status": "error", "message": message, **ERROR_ACCOUNT}


@pytest.mark.parametrize("body", [b"<html>", b"[1, 2]", b'{"limits": {}}'])
async def test_usage_malformed_body(host: Host, usage_server: HttpEndpoint, body: bytes) -> None:
    logged_in(host)
    usage_server.reply(200, body)
    expected = {"status": "error", "message": "Claude usage response was malformed.", **ERROR_ACCOUNT}
    assert await usage(host, usage_server.url) == expected


async def test_usage_unreachable_endpoint_is_an_error_with_its_text(host: Host) -> None:
    logged_in(host)
    port = closed_port()
    answer = await usage(host, f"http://127.0.0.1:{port}/api/oauth/usage")
    assert "Connection refused" in answer.pop("message")
    assert answer == {"status": "error", **ERROR_ACCOUNT}


# -- provider/installation/status ----------------------------------------------------------


async def status(host: Host) -> dict[str, Any]:
    result: dict[str, Any] = msgspec.to_builtins(await host.maintenance().installation_status(STATUS_PARAMS))
    return result


def status_of(**members: Any) -> dict[str, Any]:
    return status_answer("claude", "@anthropic-ai/claude-code", **{"latestVersion": "2.1.240", **members})


INSTALL = {"kind": "install", "label": "Install", "command": mt.INSTALL_SCRIPT}


async def test_status_not_installed_offers_the_install_script(host: Host) -> None:
    assert await status(host) == status_of(installAction=INSTALL)


async def test_status_external_and_current(host: Host) -> None:
    """The recorded shape (model-list cell): an install npm does not own, at the channel's version."""
    path = host.claude()
    host.env |= {"FAKE_CLAUDE_VERSION": "2.1.230", "FAKE_CLAUDE_CHANNEL": "stable"}
    expected = status_of(
        executablePath=str(path),
        installed=True,
        installSource="external",
        currentVersion="2.1.230",
        latestVersion="2.1.230",
    )
    assert await status(host) == expected


async def test_status_external_outdated_cannot_update_itself(host: Host) -> None:
    host.claude()
    host.env["FAKE_CLAUDE_VERSION"] = "2.1.200"
    answer = await status(host)
    assert (answer["needsUpdate"], answer["installAction"]) == (True, None)


async def test_status_npm_global_outdated_offers_update(host: Host) -> None:
    prefix = host.root / "npm-global"
    path = host.claude(prefix / "bin" / "claude")
    host.env |= {"PATH": f"{prefix / 'bin'}:{host.bin}", "FAKE_NPM_PREFIX": f"{prefix}\n", "FAKE_NPM_GLOBAL": "2.1.0"}
    host.env["FAKE_CLAUDE_VERSION"] = "2.1.0"
    expected = status_of(
        executablePath=str(path),
        installed=True,
        installSource="npmGlobal",
        currentVersion="2.1.0",
        npmGlobalPackageVersion="2.1.0",
        installAction={"kind": "update", "label": "Update", "command": "claude update"},
        needsUpdate=True,
    )
    assert await status(host) == expected


async def test_status_default_local_bin_and_native_installs_update_themselves(host: Host) -> None:
    local_bin = host.home / ".local" / "bin"
    host.claude(local_bin / "claude")
    host.env |= {"PATH": f"{local_bin}:{host.bin}", "FAKE_CLAUDE_VERSION": "2.1.239"}
    assert (await status(host))["installAction"] == {"kind": "update", "label": "Update", "command": "claude update"}
    native = host.claude(host.home / ".local" / "share" / "claude" / "versions" / "2.1.239")
    (host.root / "links").mkdir()
    (host.root / "links" / "claude").symlink_to(native)
    host.env["PATH"] = f"{host.root / 'links'}:{host.bin}"
    assert (await status(host))["installAction"] is not None


async def test_status_without_npm_knows_no_latest_and_prereleases_sort_first(host: Host) -> None:
    (host.bin / "npm").unlink()
    host.claude()
    answer = await status(host)
    assert (answer["latestVersion"], answer["needsUpdate"], answer["npmGlobalPackageVersion"]) == (None, False, None)
    assert mt.older("2.1.240-rc.1", "2.1.240") and not mt.older("2.1.240", "2.1.240-rc.1")
    assert not mt.older("2.1.0", "next") and not mt.older(None, "2.1.0")


async def test_status_names_the_override_and_quotes_its_update(host: Host) -> None:
    path = host.claude(host.home / ".local" / "share" / "claude" / "my versions" / "claude")
    host.env |= {launch.EXECUTABLE_ENV: str(path), "FAKE_CLAUDE_VERSION": "1.0.0"}
    answer = await status(host)
    assert (answer["executableName"], answer["executablePath"]) == (str(path), str(path))
    assert answer["installAction"]["command"] == f"'{path}' update"


# -- provider/installation/run -------------------------------------------------------------


async def run_action(host: Host, action: Literal["install", "update"]) -> dict[str, Any]:
    params = protocol.InstallationRunParams(providerId="claude-code", action=action)
    result: dict[str, Any] = msgspec.to_builtins(await host.maintenance().installation_run(params))
    return result


async def test_run_install_plan_and_stale_update(host: Host) -> None:
    assert await run_action(host, "install") == {
        "available": True,
        "command": {"command": "sh", "args": ["-c", mt.INSTALL_SCRIPT], "displayCommand": mt.INSTALL_SCRIPT},
        "verification": {"kind": "installed"},
    }
    assert await run_action(host, "update") == {
        "available": False,
        "message": "Claude Code update is no longer available on this host.",
    }


async def test_run_update_plan_and_stale_install(host: Host) -> None:
    local_bin = host.home / ".local" / "bin"
    host.claude(local_bin / "claude")
    host.env |= {"PATH": f"{local_bin}:{host.bin}", "FAKE_CLAUDE_VERSION": "2.1.0"}
    assert await run_action(host, "update") == {
        "available": True,
        "command": {"command": "claude", "args": ["update"], "displayCommand": "claude update"},
        "verification": {"kind": "version_at_least", "version": "2.1.240"},
    }
    assert await run_action(host, "install") == {
        "available": False,
        "message": "Claude Code install is no longer available on this host.",
    }


# -- through the bridge process ------------------------------------------------------------


async def test_health_over_json_rpc_keeps_the_member_order(host: Host) -> None:
    host.claude()
    host.login(oauth(expiresAt=FUTURE_MS, rateLimitTier="default_claude_max_5x"))
    async with spawned([sys.executable, "-m", "bridges.claude_code"], env=host.env) as child:
        await child.runtime.call("initialize", INIT)
        answer = await child.runtime.call("provider/health", {"providerId": "claude-code"})
        assert list(answer) == ["supported", "health"]
        assert list(answer["health"]) == HEALTH_ORDER
        assert answer["health"]["status"] == "ready" and answer["health"]["planLabel"] == "Max (5x)"
        assert await child.finish() == 0

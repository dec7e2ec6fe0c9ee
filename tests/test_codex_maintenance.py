"""The Codex bridge's maintenance methods (spec §2.3) against a fake host.

The host is a temporary PATH holding fake `codex` and `npm` scripts whose answers come from `FAKE_*` variables in
the bridge's environment, a temporary CODEX_HOME whose `auth.json` carries JWTs built here, a fixed clock, and a
stdlib HTTP server on 127.0.0.1 standing in for the usage endpoint: no test touches the network or real files.
"""

from __future__ import annotations

import base64
import json
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
from bridges.codex import maintenance as cm
from tests.conftest import require_shared
from tests.host_probes import closed_port, health_answer, script, status_answer
from tests.support import HttpEndpoint, http_endpoint

FAKE_CODEX = r"""
import os, sys, time
time.sleep(float(os.environ.get("FAKE_CODEX_SLEEP", "0")))
if os.environ.get("FAKE_CODEX_FAIL") or sys.argv[1:] != ["--version"]:
    sys.exit(1)
print(os.environ.get("FAKE_CODEX_VERSION", "codex-cli 0.149.0"))
"""
FAKE_NPM = r"""
import json, os, sys
args = sys.argv[1:]
if args == ["prefix", "-g"]:
    print(os.environ.get("FAKE_NPM_PREFIX", "/nonexistent/npm"))
elif args == ["list", "-g", "@openai/codex", "--depth=0", "--json"] and "FAKE_NPM_GLOBAL" in os.environ:
    print(json.dumps({"dependencies": {"@openai/codex": {"version": os.environ["FAKE_NPM_GLOBAL"]}}}))
elif args == ["view", "@openai/codex", "version"]:
    print(os.environ.get("FAKE_NPM_LATEST", "0.149.0"))
else:
    sys.exit(1)
"""
NOW = 1_800_000_000.0
PARAMS = protocol.MaintenanceParams(providerId="codex")
NPM_INSTALL = "npm install -g @openai/codex@latest"


def jwt(payload: dict[str, Any]) -> str:
    """An unsigned JWT: the maintenance probes read the claims only, they never verify a signature."""
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJub25lIn0.{body}.sig"


def chatgpt(access: dict[str, Any], id_token: dict[str, Any] | None = None, **tokens: Any) -> dict[str, Any]:
    """An `auth.json` of a ChatGPT login with the given token claims."""
    return {"auth_mode": "chatgpt", "tokens": {"access_token": jwt(access), "id_token": jwt(id_token or {}), **tokens}}


ACCOUNT = {"chatgpt_account_id": "acct-1"}
LIVE = chatgpt({"exp": NOW + 60, "email": "ada@example.com", cm.AUTH_CLAIMS: ACCOUNT})


@dataclass
class Host:
    """A fake machine: `bin` is the whole PATH, `codex_home` is `$CODEX_HOME`; `env` is the bridge's env."""

    root: Path
    bin: Path
    codex_home: Path
    env: dict[str, str] = field(default_factory=dict)

    def codex(self, where: Path | None = None, version: str | None = None) -> Path:
        if version is not None:
            self.env["FAKE_CODEX_VERSION"] = version
        return script(where or self.bin / "codex", FAKE_CODEX)

    def login(self, document: dict[str, Any] | str) -> None:
        text = document if isinstance(document, str) else json.dumps(document)
        (self.codex_home / "auth.json").write_text(text)

    def maintenance(self, **kwargs: Any) -> cm.Maintenance:
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        return cm.Maintenance(self.env, clock=lambda: NOW, opener=no_proxy, **kwargs)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    found = Host(tmp_path, tmp_path / "bin", tmp_path / "codex-home")
    found.bin.mkdir()
    found.codex_home.mkdir()
    script(found.bin / "npm", FAKE_NPM)
    found.env = {"PATH": str(found.bin), "HOME": str(tmp_path / "home"), "CODEX_HOME": f" {found.codex_home}\n"}
    return found


def health_of(status: str, **members: Any) -> dict[str, Any]:
    known = {"installedVersion": "0.149.0", "minimumSupportedVersion": "0.136.0", **members}
    return health_answer(status, login_command="codex login", **known)


async def health(host: Host) -> dict[str, Any]:
    report = msgspec.to_builtins(await host.maintenance().health(PARAMS))
    assert list(report) == ["supported", "health"] and report["supported"] is True
    result: dict[str, Any] = report["health"]
    assert list(result) == list(health_of("ready"))
    return result


# -- provider/health -----------------------------------------------------------------------


async def test_health_without_the_cli_is_not_installed(host: Host) -> None:
    host.login(LIVE)
    assert await health(host) == health_of("not_installed", installedVersion=None)


@pytest.mark.parametrize(("version", "status"), [("0.135.9", "unsupported_version"), ("0.136.0", "ready")])
async def test_health_below_the_minimum_version_is_unsupported(host: Host, version: str, status: str) -> None:
    host.codex(version=f"codex-cli {version}")
    host.login(LIVE)
    assert (await health(host))["status"] == status


@pytest.mark.parametrize(
    "document",
    [
        None,  # no auth.json at all
        {"auth_mode": "apikey", "OPENAI_API_KEY": ""},
        {"OPENAI_API_KEY": None, "tokens": {"access_token": ""}},
        chatgpt({"exp": NOW + 60}),  # no account id anywhere
        [],
    ],
)
async def test_health_without_usable_credentials_is_unauthenticated(host: Host, document: Any) -> None:
    host.codex()
    if document is not None:
        host.login(document)
    assert await health(host) == health_of("unauthenticated")


async def test_health_with_a_lapsed_token_is_expired_with_the_email(host: Host) -> None:
    host.codex()
    host.login(chatgpt({"exp": NOW, "email": "ada@example.com"}, account_id="acct-1"))  # exp × 1000 ≤ now
    assert await health(host) == health_of("expired", accountEmail="ada@example.com")


async def test_health_ready_with_a_chatgpt_login_or_an_api_key(host: Host) -> None:
    host.codex()
    host.login(LIVE)
    assert await health(host) == health_of("ready", accountEmail="ada@example.com")
    host.login({"OPENAI_API_KEY": "sk-test"})  # no auth_mode: a non-empty key is API-key auth
    assert await health(host) == health_of("ready")
    host.login({"auth_mode": "apiKey", "OPENAI_API_KEY": "sk-test", "tokens": LIVE["tokens"]})
    assert await health(host) == health_of("ready")


async def test_health_with_an_unreadable_login_is_unknown_with_the_error(host: Host) -> None:
    host.codex()
    host.login("{not json")
    answer = await health(host)
    assert answer.pop("statusMessage")
    assert answer == {k: v for k, v in health_of("unknown").items() if k != "statusMessage"}


async def test_a_failing_or_slow_version_probe_reads_as_no_version(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    host.codex()
    host.login(LIVE)
    host.env["FAKE_CODEX_FAIL"] = "1"
    assert (await health(host))["installedVersion"] is None
    del host.env["FAKE_CODEX_FAIL"]
    monkeypatch.setattr(cli_probes, "PROBE_TIMEOUT_S", 0.2)
    host.env["FAKE_CODEX_SLEEP"] = "5"
    started = time.monotonic()
    assert await health(host) == health_of("ready", accountEmail="ada@example.com", installedVersion=None)
    assert time.monotonic() - started < 3  # the probe was killed at its timeout, not waited for


def test_codex_home_is_the_trimmed_variable_else_dot_codex_under_home(host: Host) -> None:
    assert host.maintenance().codex_home == str(host.codex_home)
    host.env["CODEX_HOME"] = " \t"
    assert host.maintenance().codex_home == str(host.root / "home" / ".codex")


def test_credentials_account_email_and_fedramp_precedence() -> None:
    profile = {cm.PROFILE_CLAIMS: {"email": "id-profile@example.com"}}
    document = chatgpt(
        {"exp": NOW + 1, cm.AUTH_CLAIMS: {"chatgpt_account_id": "from-access"}},
        {"email": "id@example.com", **profile, cm.AUTH_CLAIMS: {"chatgpt_account_is_fedramp": True}},
    )
    creds = cm.credentials_from(document, NOW)
    assert creds == cm.Credentials(document["tokens"]["access_token"], "from-access", "id@example.com", False, True)
    document["tokens"]["account_id"] = "from-tokens"
    document["tokens"]["id_token"] = jwt({**profile, cm.AUTH_CLAIMS: {"chatgpt_account_id": "from-id"}})
    creds = cm.credentials_from(document, NOW)
    assert creds is not None
    assert (creds.account_id, creds.email, creds.fedramp) == ("from-tokens", "id-profile@example.com", False)
    document["tokens"]["access_token"] = "not-a-jwt"
    del document["tokens"]["account_id"]
    creds = cm.credentials_from(document, NOW)
    assert creds is not None and (creds.account_id, creds.expired) == ("from-id", False)


# -- provider/usage ------------------------------------------------------------------------


@pytest.fixture
def usage_server() -> Iterator[HttpEndpoint]:
    with http_endpoint("/backend-api/wham/usage") as server:
        yield server


async def usage(maintenance: cm.Maintenance) -> dict[str, Any]:
    report = msgspec.to_builtins(await maintenance.usage(PARAMS))
    assert report["supported"] is True
    result: dict[str, Any] = report["usage"]
    return result


def logged_in(host: Host, usage_server: HttpEndpoint) -> cm.Maintenance:
    host.codex()
    host.login(LIVE)
    return host.maintenance(usage_url=usage_server.url)


def error(message: str) -> dict[str, Any]:
    return {"status": "error", "message": message, "planLabel": None, "accountEmail": None}


async def test_usage_answers_without_a_request_when_it_cannot_ask(host: Host, usage_server: HttpEndpoint) -> None:
    ask = host.maintenance(usage_url=usage_server.url)
    assert await usage(ask) == {"status": "not_installed"}
    host.codex()
    assert await usage(ask) == {"status": "unauthenticated"}
    host.login("{not json")
    assert (await usage(ask))["status"] == "error"
    host.login({"auth_mode": "apikey", "OPENAI_API_KEY": "sk-test"})
    assert await usage(ask) == error(cm.API_KEY_USAGE)
    host.login(chatgpt({"exp": NOW - 1, cm.AUTH_CLAIMS: ACCOUNT}))
    assert await usage(ask) == {"status": "expired"}
    assert usage_server.requests == []


async def test_usage_ok_with_the_plan_and_both_windows(host: Host, usage_server: HttpEndpoint) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(
        200,
        {
            "plan_type": "pro",
            "rate_limit": {
                "primary_window": {"used_percent": 27.5, "limit_window_seconds": 18000, "reset_at": 1_800_000_123},
                "secondary_window": {"used_percent": 100.4, "limit_window_seconds": 604800, "reset_at": None},
            },
        },
    )
    assert await usage(ask) == {
        "status": "ok",
        "accountEmail": "ada@example.com",
        "planLabel": "Pro",
        "windows": [
            {"label": "Current session", "usedPercent": 28, "resetsAt": "2027-01-15T08:02:03.000Z"},
            {"label": "Weekly limit", "usedPercent": 100, "resetsAt": None},
        ],
    }
    (sent,) = usage_server.requests
    assert sent["path"] == "/backend-api/wham/usage"
    assert (sent["authorization"], sent["chatgpt-account-id"]) == (f"Bearer {LIVE['tokens']['access_token']}", "acct-1")
    assert (sent["originator"], sent["user-agent"], sent["accept"]) == ("bb", "bb-provider-codex", "application/json")
    assert "x-openai-fedramp" not in sent and "cookie" not in sent


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        ({}, []),
        ({"primary_window": None, "secondary_window": {"used_percent": -3}}, [("Weekly limit", 0)]),
        ({"primary_window": {"used_percent": 2.5, "limit_window_seconds": 604800}}, [("Weekly limit", 3)]),
        ({"primary_window": {"used_percent": 99.49}, "secondary_window": {}}, [("Current session", 99), ("Weekly limit", 0)]),
    ],
)  # fmt: skip
async def test_usage_windows_round_half_up_clamp_and_label_a_week_weekly(
    host: Host, usage_server: HttpEndpoint, windows: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(200, {"rate_limit": windows})
    answer = await usage(ask)
    assert answer["planLabel"] is None
    assert [(w["label"], w["usedPercent"]) for w in answer["windows"]] == expected


@pytest.mark.parametrize(
    ("plan", "label"),
    [("free", "Free"), ("go", "Go"), ("plus", "Plus"), ("team", "Team"), ("business", "Business"),
     ("edu", "Education"), ("education", "Education"), ("enterprise", "Enterprise"), ("k12_beta", "K12_beta"),
     ("", None), (None, None)],
)  # fmt: skip
def test_plan_label(plan: str | None, label: str | None) -> None:
    assert cm.plan_label(plan) == label


async def test_usage_sends_the_fedramp_header_for_a_fedramp_account(host: Host, usage_server: HttpEndpoint) -> None:
    host.codex()
    host.login(chatgpt({cm.AUTH_CLAIMS: {**ACCOUNT, "chatgpt_account_is_fedramp": True}}))
    usage_server.reply(200, {})
    assert (await usage(host.maintenance(usage_url=usage_server.url)))["status"] == "ok"
    assert usage_server.requests[0]["x-openai-fedramp"] == "true"


async def test_usage_401_means_the_login_expired(host: Host, usage_server: HttpEndpoint) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(401, {"error": "token expired"})
    assert await usage(ask) == {"status": "expired"}


@pytest.mark.parametrize("status", [429, 500, 404, 403])
async def test_usage_other_failures_name_the_status_and_are_not_retried(
    host: Host, usage_server: HttpEndpoint, status: int
) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(status, b"")
    assert await usage(ask) == error(f"Codex usage request failed (HTTP {status}).")
    assert len(usage_server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [b"<html>", b"[1]", b'{"plan_type": 3}', b'{"rate_limit": []}', b'{"rate_limit": {"primary_window": 5}}',
     b'{"rate_limit": {"secondary_window": {"used_percent": "50"}}}', b'{"rate_limit": {"primary_window": {"reset_at": true}}}'],
)  # fmt: skip
async def test_usage_malformed_body(host: Host, usage_server: HttpEndpoint, body: bytes) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(200, body)
    assert await usage(ask) == error("Codex usage response was malformed.")


async def test_usage_unreachable_endpoint_is_an_error_with_its_text(host: Host) -> None:
    host.codex()
    host.login(LIVE)
    port = closed_port()
    answer = await usage(host.maintenance(usage_url=f"http://127.0.0.1:{port}/"))
    assert "Connection refused" in answer.pop("message")
    assert answer == {"status": "error", "planLabel": None, "accountEmail": None}


CHALLENGE_COOKIES = "__cf_bm=bm1; Path=/; HttpOnly\nsession=secret; Path=/\ncf_chl_rc_m=1; Path=/\ncf_clearance=ok"


async def test_a_cloudflare_challenge_is_retried_once_with_its_cookies_replayed_later(
    host: Host, usage_server: HttpEndpoint
) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(403, b"<challenge>", cf_mitigated="challenge", set_cookie=CHALLENGE_COOKIES)
    usage_server.reply(200, {"plan_type": "plus"}, set_cookie="_cfuvid=uv1; Path=/")
    assert (await usage(ask))["planLabel"] == "Plus"
    first, retry = usage_server.requests
    assert "cookie" not in first
    assert retry["cookie"] == "__cf_bm=bm1; cf_chl_rc_m=1; cf_clearance=ok"  # only Cloudflare's cookies
    assert (await usage(ask))["status"] == "ok"  # the process keeps them: the next fetch replays them at once
    assert usage_server.requests[2]["cookie"] == "__cf_bm=bm1; cf_chl_rc_m=1; cf_clearance=ok; _cfuvid=uv1"


async def test_a_second_cloudflare_challenge_is_an_error(host: Host, usage_server: HttpEndpoint) -> None:
    ask = logged_in(host, usage_server)
    usage_server.reply(403, b"", cf_mitigated="challenge")
    assert await usage(ask) == error("Codex usage request failed (HTTP 403).")
    assert len(usage_server.requests) == 2


# -- provider/installation/status ----------------------------------------------------------


async def status(host: Host, requirement: Literal["thread_rewind"] | None = None) -> dict[str, Any]:
    params = protocol.InstallationStatusParams(providerId="codex")
    if requirement is not None:
        params = protocol.InstallationStatusParams(providerId="codex", requirement=requirement)
    result: dict[str, Any] = msgspec.to_builtins(await host.maintenance().installation_status(params))
    return result


def status_of(**members: Any) -> dict[str, Any]:
    known = {"latestVersion": "0.149.0", "minimumSupportedVersion": "0.136.0", **members}
    return status_answer("codex", "@openai/codex", **known)


UPDATE_BY_ITSELF = {"kind": "update", "label": "Update", "command": "codex update"}
UPDATE_BY_NPM = {"kind": "update", "label": "Update", "command": NPM_INSTALL}


async def test_status_not_installed_offers_the_npm_install(host: Host) -> None:
    assert await status(host) == status_of(
        installAction={"kind": "install", "label": "Install", "command": NPM_INSTALL}
    )


async def test_status_external_and_current_matches_the_recorded_answer(host: Host) -> None:
    """The model-list cell's one recorded answer: same members in the same order, same values but the path."""
    recorded_lane = require_shared("recordings", "codex", "model-list", "bridge→runtime.ndjson")
    lines = [json.loads(json.loads(line)["line"]) for line in recorded_lane.read_text().splitlines()]
    (recorded,) = [line["result"] for line in lines if "executableName" in line.get("result", {})]
    path = host.codex()
    answer = await status(host)
    assert list(answer) == list(recorded) == list(status_of())
    assert answer == recorded | {"executablePath": str(path)}


async def test_status_npm_global_outdated_updates_through_npm(host: Host) -> None:
    prefix = host.root / "npm-global"
    path = host.codex(prefix / "bin" / "codex", version="codex-cli v0.140.0")
    host.env |= {"PATH": f"{prefix / 'bin'}:{host.bin}", "FAKE_NPM_PREFIX": f"{prefix}\n", "FAKE_NPM_GLOBAL": "0.140.0"}
    assert await status(host) == status_of(
        executablePath=str(path),
        installed=True,
        installSource="npmGlobal",
        currentVersion="0.140.0",
        npmGlobalPackageVersion="0.140.0",
        installAction=UPDATE_BY_NPM,
        needsUpdate=True,
    )


async def test_status_external_outdated_updates_itself(host: Host) -> None:
    host.codex(version="codex-cli 0.148.9")
    host.env["FAKE_NPM_LATEST"] = "v0.149.0"
    answer = await status(host)
    assert (answer["installSource"], answer["currentVersion"], answer["latestVersion"]) == (
        "external",
        "0.148.9",
        "0.149.0",
    )
    assert (answer["needsUpdate"], answer["installAction"]) == (True, UPDATE_BY_ITSELF)


async def test_status_version_unsupported_by_minimum_and_by_requirement(host: Host) -> None:
    host.codex(version="codex-cli 0.140.0")
    host.env["FAKE_NPM_LATEST"] = "0.140.0"
    plain = await status(host)
    assert (plain["versionUnsupported"], plain["installAction"], plain["minimumSupportedVersion"]) == (
        False,
        None,
        "0.136.0",
    )
    rewind = await status(host, "thread_rewind")
    assert (rewind["versionUnsupported"], rewind["needsUpdate"]) == (True, False)
    assert (rewind["installAction"], rewind["minimumSupportedVersion"]) == (UPDATE_BY_ITSELF, "0.143.0")
    host.env["FAKE_CODEX_VERSION"] = "codex-cli 0.135.0"
    assert (await status(host))["versionUnsupported"] is True


async def test_status_with_an_unknown_version_is_unsupported_only_for_a_requirement(host: Host) -> None:
    host.codex(version="codex-cli dev build")
    answer = await status(host)
    assert (answer["installed"], answer["currentVersion"], answer["versionUnsupported"]) == (True, None, False)
    assert (answer["needsUpdate"], answer["installAction"]) == (False, None)
    answer = await status(host, "thread_rewind")
    assert (answer["versionUnsupported"], answer["installAction"]) == (True, UPDATE_BY_ITSELF)


async def test_status_without_npm_knows_no_latest(host: Host) -> None:
    (host.bin / "npm").unlink()
    host.codex(version="codex-cli 0.100.0")
    answer = await status(host)
    assert (answer["latestVersion"], answer["needsUpdate"], answer["versionUnsupported"]) == (None, False, True)


def test_versions_compare_numbers_then_release_over_prerelease_then_prerelease_text() -> None:
    assert cli_probes.older("0.9.9", "0.10.0") and not cli_probes.older("0.10.0", "0.9.9")
    assert cli_probes.older("0.149.0-alpha.2", "0.149.0") and not cli_probes.older("0.149.0", "0.149.0-alpha.2")
    assert cli_probes.older("0.149.0-alpha.10", "0.149.0-alpha.2")  # as strings, not numerically
    assert not cli_probes.older("0.149.0", "0.149.0") and not cli_probes.older(None, "1.0.0")
    assert not cli_probes.older("1.0.0", "latest")
    assert cli_probes.parse_version("codex-cli v0.149.0-beta.1 (abc)") == "0.149.0-beta.1"


def test_display_commands_quote_only_arguments_outside_the_safe_set() -> None:
    safe = ["npm", "install", "-g", "@openai/codex@latest", "a_b.c/d:e+f"]
    assert cli_probes.display_command(safe) == " ".join(safe)
    assert cli_probes.display_command(["x=1", "a,b", "50%", "two words", "it's", ""]) == (
        "'x=1' 'a,b' '50%' 'two words' 'it'\"'\"'s' ''"
    )


# -- provider/installation/run -------------------------------------------------------------


async def run_action(host: Host, action: Literal["install", "update"]) -> dict[str, Any]:
    params = protocol.InstallationRunParams(providerId="codex", action=action)
    result: dict[str, Any] = msgspec.to_builtins(await host.maintenance().installation_run(params))
    return result


def unavailable(action: str) -> dict[str, Any]:
    return {"available": False, "message": f"Codex {action} is no longer available on this host."}


async def test_run_install_plan_and_stale_update(host: Host) -> None:
    assert await run_action(host, "install") == {
        "available": True,
        "command": {"command": "npm", "args": ["install", "-g", "@openai/codex@latest"], "displayCommand": NPM_INSTALL},
        "verification": {"kind": "installed"},
    }
    assert await run_action(host, "update") == unavailable("update")


async def test_run_update_of_an_external_install_and_stale_install(host: Host) -> None:
    host.codex(version="codex-cli 0.140.0")
    assert await run_action(host, "update") == {
        "available": True,
        "command": {"command": "codex", "args": ["update"], "displayCommand": "codex update"},
        "verification": {"kind": "version_at_least", "version": "0.149.0"},
    }
    assert await run_action(host, "install") == unavailable("install")


async def test_run_update_of_an_npm_install_goes_through_npm(host: Host) -> None:
    prefix = host.root / "npm-global"
    host.codex(prefix / "bin" / "codex", version="codex-cli 0.140.0")
    host.env |= {"PATH": f"{prefix / 'bin'}:{host.bin}", "FAKE_NPM_PREFIX": str(prefix)}
    plan = await run_action(host, "update")
    assert plan["command"] == {
        "command": "npm",
        "args": ["install", "-g", "@openai/codex@latest"],
        "displayCommand": NPM_INSTALL,
    }


async def test_run_update_without_a_known_latest_verifies_a_changed_version(host: Host) -> None:
    """Unsupported (below the minimum) but npm cannot say what is latest: any new version will do."""
    (host.bin / "npm").unlink()
    host.codex(version="codex-cli 0.135.0")
    plan = await run_action(host, "update")
    assert plan["verification"] == {"kind": "version_changed", "previousVersion": "0.135.0"}


async def test_run_of_a_current_install_offers_nothing(host: Host) -> None:
    host.codex()
    assert await run_action(host, "update") == unavailable("update")

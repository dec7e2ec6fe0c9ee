"""The environment a bridge is spawned with (protocol.md §9.6)."""

from __future__ import annotations

from pathlib import Path

from bbridge.daemon.bridge import bridge_env
from bbridge.daemon.config import ProviderConfig


def test_bb_variables_and_node_env_are_stripped_and_passthroughs_readded() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/root",
        "NODE_ENV": "prod",
        "BB_SECRET": "x",
        "BB_TOKEN": "t",
        "API_KEY": "k",
        "EMPTY": "",
    }
    config = ProviderConfig(command=["b"], env_passthrough=["BB_TOKEN", "EMPTY", "MISSING"], env={"MODE": "fast"})
    env = bridge_env("p", config, base, None)
    assert env == {"PATH": "/bin", "HOME": "/root", "API_KEY": "k", "EMPTY": "", "BB_TOKEN": "t", "MODE": "fast"}


def test_the_record_dir_is_passed_down_per_provider_and_only_the_daemons_own() -> None:
    base = {"BB_PROVIDER_BRIDGE_RECORD_DIR": "/shell/value"}
    config = ProviderConfig(command=["b"])
    assert "BB_PROVIDER_BRIDGE_RECORD_DIR" not in bridge_env("p", config, base, None)
    env = bridge_env("codex", config, base, Path("/rec"))
    assert env["BB_PROVIDER_BRIDGE_RECORD_DIR"] == "/rec/codex"

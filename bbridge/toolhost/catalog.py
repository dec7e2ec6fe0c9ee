"""Every hosted tool, composed first-wins: `bbridge.toml` shadows a bundle of the same name."""

from __future__ import annotations

from pathlib import Path

import msgspec

from bbridge.config_file import ConfigError, Refusal, read_toml
from bbridge.toolhost.bundles import load_bundles
from bbridge.toolhost.declarations import HostedTool, declared_tools
from bbridge.toolhost.mcp import McpServerConfig, mcp_server_configs


class Shadowing(msgspec.Struct, frozen=True):
    """A tool left out because an earlier source declares the same name."""

    name: str
    kept: str
    shadowed: str


class Catalog(msgspec.Struct):
    tools: list[HostedTool]
    refused: list[Refusal]
    shadowed: list[Shadowing]
    disabled: list[str]
    servers: list[McpServerConfig] = []  # `[mcp_servers.NAME]`: their tools are known once connected (`mcp_servers`)


def load_tools(config: Path | None, tools_dir: Path | None) -> Catalog:
    """The tools of `config`'s `[tools.NAME]` tables, then of the bundles in `tools_dir`; its MCP servers.

    Raises ConfigError when the file or the directory cannot be used at all; a broken entry only refuses itself.
    """
    catalog = Catalog([], [], [], [])
    if config is not None:
        raw = read_toml(config)
        tables = raw.get("tools", {})
        if not isinstance(tables, dict):
            raise ConfigError(f"{config}: tools: expected a table, got {type(tables).__name__}")
        catalog.tools, catalog.refused = declared_tools(tables, str(config))
        if "mcp_servers" in raw:
            catalog.servers, refused = mcp_server_configs(raw["mcp_servers"], str(config))
            catalog.refused.extend(refused)
    if tools_dir is not None:
        if not tools_dir.is_dir():
            raise ConfigError(f"{tools_dir}: not a directory (--tools-dir names the directory of plugin bundles)")
        bundles = load_bundles(tools_dir)
        catalog.refused.extend(bundles.refused)
        catalog.disabled = bundles.disabled
        declared = {tool.name: tool for tool in catalog.tools}
        for tool in bundles.tools:
            if tool.name in declared:
                catalog.shadowed.append(Shadowing(tool.name, declared[tool.name].source, tool.source))
            else:
                catalog.tools.append(tool)
    return catalog

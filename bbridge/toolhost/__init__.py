"""Tools hosted by the daemon (issue 35): declared once in `bbridge.toml` or as plugin bundles, decided by one
policy, run safely and audited; `host.Host` is what the daemon calls (`bbridge.seams.tool_host.ToolHost`).
"""

"""Tools hosted by the daemon (issue 35): declared once in `bbridge.toml` or as plugin bundles.

This first step only declares and checks them (`bbridge tools check`); the daemon does not offer or run them yet.
"""

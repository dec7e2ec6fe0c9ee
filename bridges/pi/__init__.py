"""The pi coding agent's bridge (`python -m bridges.pi`): one `pi --mode rpc` child per thread (pi-bridge.md)."""

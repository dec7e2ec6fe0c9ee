"""The Codex provider bridge: `codex app-server` (JSON-RPC over stdio) spoken as bb protocol 2 upward.

`translate` turns app-server notifications into grammar deltas exactly as the reference bridge does
(shared/spec/codex-bridge.md §3); `session` writes them with the reference's key order (the kit's `DeltaEncoder`).
"""

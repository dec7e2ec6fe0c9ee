"""bbridge: the timeline daemon between an IDE server and AI coding agents' provider bridges.

Layers, bottom up (ARCHITECTURE.md; `make lint` holds them with import contracts):
`core` (pure assembly) → `wire` (messages, JSON-RPC) and `logs` → `daemon` (the
trio runtime) beside `kit` (for bridge authors) → `replay` (recordings, parity)
→ `run`, `conformance`, `bench` → `cli`. Bridges (`bridges/`) import only
`kit`, `wire` and `core`.
"""

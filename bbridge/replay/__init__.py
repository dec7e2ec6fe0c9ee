"""Recorded traffic played back: offline assembly, parity checks, live-bridge replay.

Holds the offline replay of a cell's `bridge→runtime` lane (`cells`), parity
against the reference's goldens and synthetic cases (`parity`), the §6.3 replay
driver that plays a cell's runtime lane into a live bridge (`driver`) over the
ordered-log bridge client (`bridge_client`), the fake provider child that plays the
provider lanes (`fake_agent`; JSON-RPC for ACP and Codex, the Claude Code
CLI's stream-json in `claude_cli`; the state directory it shares with the
driver in `state_dir`), the per-provider profiles that point a
bridge at it (`driver.prepare_profile`), and `bridge_parity`, which diffs a live
bridge's output against the goldens. May import the daemon (to spawn bridges
as it does), the wire and the core; conformance, bench and the CLI build on it.
"""

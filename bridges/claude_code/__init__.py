"""A provider bridge for the Claude Code CLI (headless stream-json, the control protocol).

Spec: `shared/spec/claude-code-bridge.md`. The translation of the CLI's SDK messages into
`thread/delta` grammar v3 (`translate`) is pure and synchronous, so its byte parity with the
reference bridge is proven offline against the recorded cells.
"""

"""`python -m bridges.codex`: the Codex provider bridge on stdio."""

from bridges.codex.bridge import CodexBridge

CodexBridge().bridge.run()

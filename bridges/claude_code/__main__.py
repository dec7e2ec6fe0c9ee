"""`python -m bridges.claude_code`: the Claude Code provider bridge on stdio."""

from bridges.claude_code.bridge import ClaudeCodeBridge

ClaudeCodeBridge().bridge.run()

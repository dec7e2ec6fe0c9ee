"""Live-test infrastructure: real agent CLIs run fully offline against scripted model APIs the tests own.

Shared: `tests.live.scripted` (the scripted HTTP server on 127.0.0.1: lifecycle, script queue, request record,
bounded waits, SSE writing; each API dialect below keeps only its wire format), `tests.live.runner` (the CLIs'
`.cache` locations, the offline environment's core, a child in its own process group and its stop, a bridge's
provider entry for the daemon, `bbridge conformance` over a bridge), `tests.live.processes` (leftover checks) and
`tests.live.scenarios` (the recorded cells' request shapes and the steps the Claude Code and codex tests run alike).

Claude Code: `tests.live.anthropic` (a scripted Anthropic Messages API on 127.0.0.1, SSE like the real API) and
`tests.live.claude` (the pinned CLI, an offline environment, a small stream-json driver); what the real CLI was
seen doing is in `tests/live/NOTES.md`.

Codex: `tests.live.openai` (a scripted OpenAI Responses API on 127.0.0.1) and `tests.live.codex` (the pinned
`codex app-server`, an offline CODEX_HOME, a small JSON-RPC driver); notes in `tests/live/CODEX_NOTES.md`.

pi: `tests.live.openai_chat` (a scripted OpenAI Chat Completions API on 127.0.0.1) and `tests.live.pi` (the pinned
pi and node, an offline agent dir with a custom `models.json` provider, a small `pi --mode rpc` driver); notes in
`tests/live/PI_NOTES.md`.

Skills: `tests.live.skills` (a skill root on disk, and the Claude Code plugin directory that loads one).

Every agent behind one shape (`tests.live.agents`): each of the above, and the small ACP agent of
`tests/test_acp_tools.py`, as one provider world with a scripted model that calls a tool, for the tool tests.
"""

"""The trio runtime between clients and bridge subprocesses (ARCHITECTURE.md, "daemon").

`runtime.Daemon` assembles the parts, each owning its state: `fanout` (the clients and the journal in front of
them), `supervisor` (bridge processes, `bridge`, and releasing threads), `delivery` (bridge output to clients),
`relays` (bridge requests held as pending thread state, `pending`), `status` (`daemon/status`), over the thread
records (`threads`). Client requests arrive through `server` (stdio, a Unix socket; the listener's WebSocket
connections too) and are answered by the runtime or forwarded with their rule (`methods`). Below them: the
configuration (`config`), the journal, open-work tracking (`tracker`), watchdogs, extension payload checks,
declared and offered tools (`declared_tools`, `toolcheck`, `offered_tools`, `tool_host`). May import the wire and
the core; never the kit, replay or the CLI, which sit beside or above it.
"""

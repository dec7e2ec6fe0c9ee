"""The daemon's narrow interfaces: what it asks of the rooms above it (the tool host, agent configuration, a room's
client methods), as types and protocols alone. A room imports these and never `bbridge.daemon` (an import contract
says so, with no exception), so the daemon's internals can change under them."""

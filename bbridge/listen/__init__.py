"""The daemon's network face: `bbridge serve --listen HOST:PORT` (HTTP/1.1 with the client API over WebSocket).

A room above the daemon: it serves the daemon's clients through `bbridge.daemon.server.ClientConnection` and reads its state
through `daemon/status`, never its internals. `face` accepts and routes, `http` reads a request under bounds,
`wsstream` is a WebSocket connection as a client's byte stream, `admission` decides who may use an address,
`routes` answers `/healthz`, `/readyz`, `/metrics` and the page's files, `options` turns `serve`'s flags into settings.
"""

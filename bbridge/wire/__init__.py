"""The wire: what crosses a pipe or a socket, and the connection that carries it.

Holds the bridge protocol's message types (`protocol`: handshake, method
params and results; `maintenance`, `interactions`: their payloads), the daemon's
client API types (`client_api`) and its own error codes (`errors`), the
JSON-RPC connection with its bounded line reader (`rpc`), the JSON Schema export of all of these (`schema`), and the
record-mode lanes, written and read (`lanes`), which both the daemon and
bridges use. May import the core, trio, msgspec and structlog;
the daemon, the kit and everything above import it.
"""

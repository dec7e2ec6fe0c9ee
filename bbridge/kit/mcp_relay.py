"""The stdio end of the `bb-bridge` MCP server that offers a thread's dynamic tools to its agent.

The ACP bridge lists this server in `session/new` / `session/load` / `session/fork` `mcpServers` (ACP's stdio
form: `{name, command, args, env}`); the agent launches it as `python -I .../bbridge/kit/mcp_relay.py`, a
script: it imports nothing of bbridge (not even its package), so it runs from its path under `-I`. It is a
relay: it connects to the thread's Unix socket (`BB_ACP_MCP_SOCKET`, mode 0600 in a 0700 directory the bridge
owns), presents the thread's token (`BB_ACP_MCP_TOKEN`) as its first line, and once the bridge answers `ok`
copies stdin to the socket and the socket to stdout, byte for byte. The MCP protocol itself (`initialize`,
`ping`, `tools/list`, `tools/call`) is answered by the bridge (`bbridge.kit.mcp_host`), which holds the
thread's tools and its connection to the runtime.

Standard library only, so it starts fast (~0.05 s) with `-I` (no site packages, no script directory on
`sys.path`) wherever the agent runs it. It ends when the agent closes its stdin (after the answers still owed,
bounded) or when the bridge closes the socket (the session ended); a refused token or an unreachable socket is
one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from typing import BinaryIO

SOCKET_ENV = "BB_ACP_MCP_SOCKET"
TOKEN_ENV = "BB_ACP_MCP_TOKEN"
HELLO = b"bb-bridge-mcp "  # the first line a relay writes: HELLO + token
ACK = b"ok"
MAX_HELLO_BYTES = 256
CHUNK = 65536
DRAIN_S = 5.0


def _read_line(sock: socket.socket) -> bytes:
    """One short line (the bridge's answer to the hello), without its newline; b"" when refused."""
    line = bytearray()
    while len(line) <= MAX_HELLO_BYTES:
        byte = sock.recv(1)
        if not byte:
            return b""
        if byte == b"\n":
            return bytes(line)
        line += byte
    return b""


def connect(path: str, token: str) -> socket.socket:
    """A connection to the bridge that accepted this token; `ConnectionRefusedError` when it did not."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(HELLO + token.encode() + b"\n")
        if _read_line(sock) != ACK:
            raise ConnectionRefusedError("the bridge refused this server's token")
    except BaseException:
        sock.close()
        raise
    return sock


def _to_stdout(sock: socket.socket, out: BinaryIO) -> None:
    """Socket → stdout until the bridge closes; then the whole server ends (the session is over)."""
    try:
        while data := sock.recv(CHUNK):
            out.write(data)
            out.flush()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            out.flush()
        os._exit(0)


def main() -> int:
    path, token = os.environ.get(SOCKET_ENV), os.environ.get(TOKEN_ENV)
    if not path or not token:
        print(
            f"bb-bridge: {SOCKET_ENV} and {TOKEN_ENV} must be set; the ACP bridge launches this server through its "
            "agent (session/new mcpServers)",
            file=sys.stderr,
        )
        return 2
    try:
        sock = connect(path, token)
    except OSError as exc:
        print(f"bb-bridge: cannot reach the ACP bridge at {path}: {exc}", file=sys.stderr)
        return 1
    reader = threading.Thread(target=_to_stdout, args=(sock, sys.stdout.buffer), daemon=True)
    reader.start()
    stdin = sys.stdin.fileno()
    try:
        while data := os.read(stdin, CHUNK):
            sock.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)  # the bridge answers what it was asked, then closes: the reader ends us
    reader.join(DRAIN_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`wire.websocket`, sans-IO: a text message is one line however it is framed or split, and each line written is
one text frame; a binary message is refused as a socket refuses a junk line; a close is answered."""

from __future__ import annotations

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Ping, Request, TextMessage

from bbridge.wire.websocket import BINARY_REFUSED, ClientHandshake, HandshakeError, MessageLines

UPGRADE = [
    (b"host", b"127.0.0.1:1"),
    (b"upgrade", b"websocket"),
    (b"connection", b"Upgrade"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-version", b"13"),
]


def pair() -> tuple[MessageLines, WSConnection]:
    """The server side under test and a wsproto client speaking to it."""
    client = WSConnection(ConnectionType.CLIENT)
    request = client.send(Request(host="127.0.0.1:1", target="/rpc"))
    head = [line.split(b": ", 1) for line in request.split(b"\r\n")[1:] if b": " in line]
    server, accepted = MessageLines.server([(k.lower(), v) for k, v in head], b"/rpc")
    client.receive_data(accepted)
    assert isinstance(next(client.events()), AcceptConnection)
    return server, client


def test_a_pretty_printed_message_split_over_frames_and_reads_is_one_line() -> None:
    server, client = pair()
    wire = client.send(TextMessage(data='{\n  "jsonrpc": "2.0",\r\n', message_finished=False))
    wire += client.send(TextMessage(data=' "id": 1, "method": "x"}', message_finished=True))
    got = b"".join(server.receive(wire[i : i + 3]).lines for i in range(0, len(wire), 3))
    assert got == b'{   "jsonrpc": "2.0",   "id": 1, "method": "x"}\n'


def test_each_line_written_is_one_text_frame() -> None:
    server, client = pair()
    client.receive_data(server.frames(b'{"a":1}\n{"b":2}\n'))
    assert [e.data for e in client.events() if isinstance(e, TextMessage)] == ['{"a":1}', '{"b":2}']


def test_server_frames_are_the_bytes_wsprotos_connection_makes() -> None:
    """The server side frames lines through wsproto's frame protocol directly: byte for byte what its connection
    sends for each line as a text message, a long line's extended length and a non-UTF-8 byte's replacement
    included."""
    server, client = pair()
    reference = WSConnection(ConnectionType.SERVER)
    reference.initiate_upgrade_connection(UPGRADE, "/rpc")
    reference.send(AcceptConnection())
    lines = [b'{"a":"\xc3\xa9"}', b"x" * 70_000, b'{"b":"\xff"}', b"{}"]
    expected = b"".join(reference.send(TextMessage(data=line.decode("utf-8", "replace"))) for line in lines)
    assert server.frames(b"\n".join(lines) + b"\n") == expected
    client.receive_data(expected)
    assert [e.data for e in client.events() if isinstance(e, TextMessage)][-1] == "{}"


def test_a_broadcast_is_framed_once_for_every_server_connection_and_never_for_a_closed_one() -> None:
    """Server frames are unmasked: the same lines written to each client in turn reuse the first framing, each
    client reads them; a client's frames are masked afresh each time, and a closed connection writes nothing."""
    (first, first_client), (second, second_client) = pair(), pair()
    lines = b'{"a":1}\n{"b":2}\n'
    framed = first.frames(lines)
    assert second.frames(bytes(bytearray(lines))) is framed  # equal lines, not the same object: framed once
    for client in (first_client, second_client):
        client.receive_data(framed)
        assert [e.data for e in client.events() if isinstance(e, TextMessage)] == ['{"a":1}', '{"b":2}']
    first.receive(first_client.send(CloseConnection(code=1000)))
    assert first.frames(lines) == b""
    masked = ClientHandshake("127.0.0.1:1", "/rpc", [])
    server_ws = WSConnection(ConnectionType.SERVER)
    server_ws.receive_data(masked.request)
    list(server_ws.events())
    client_lines = masked.feed(server_ws.send(AcceptConnection()))
    assert client_lines is not None and client_lines.frames(lines) != client_lines.frames(lines)


def test_a_binary_message_is_answered_by_its_id_or_not_at_all() -> None:
    server, client = pair()
    got = server.receive(client.send(BytesMessage(data=b'{"jsonrpc":"2.0","id":5,"method":"m"}')))
    assert got.lines == b"" and got.refused == [BINARY_REFUSED]
    client.receive_data(got.reply)
    (answer,) = list(client.events())
    assert isinstance(answer, TextMessage) and '"id":5' in answer.data and "-32600" in answer.data
    silent = server.receive(client.send(BytesMessage(data=b"\x00\x01")))
    assert silent.refused == [BINARY_REFUSED] and silent.reply == b""


def test_pings_are_answered_and_a_close_ends_the_lines() -> None:
    server, client = pair()
    got = server.receive(client.send(Ping(payload=b"p")))
    client.receive_data(got.reply)
    assert [type(e).__name__ for e in client.events()] == ["Pong"]
    closing = server.receive(client.send(CloseConnection(code=1000, reason="bye")))
    assert closing.closed and closing.close_reason == "bye" and closing.reply
    assert server.frames(b"late\n") == b""  # nothing is written after the close


def test_a_refused_upgrade_names_its_status() -> None:
    handshake = ClientHandshake("127.0.0.1:1", "/rpc", [("Authorization", "Bearer x")])
    assert b"Authorization: Bearer x" in handshake.request
    with pytest.raises(HandshakeError) as refused:
        handshake.feed(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 9\r\n\r\nnot here\n")
    assert refused.value.status == 403 and "not here" in str(refused.value)
    with pytest.raises(HandshakeError, match="closed during"):
        ClientHandshake("h", "/rpc", []).feed(None)

"""bbridge.wire.framing: the bounded line reader, sans-IO (no trio)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from bbridge.wire.framing import HEAD_BYTES, LineReader, Overflow
from bbridge.wire.jsonrpc import recover_id


def feed_all(reader: LineReader, *chunks: bytes) -> list[bytes | Overflow]:
    out: list[bytes | Overflow] = []
    for chunk in chunks:
        out.extend(reader.feed(chunk))
    return out


def test_lines_split_across_chunks() -> None:
    reader = LineReader()
    assert feed_all(reader, b'{"a":', b"1}\n{", b'"b":2}\n\n', b"tail") == [b'{"a":1}', b'{"b":2}', b""]
    assert reader.close() == [b"tail"]
    assert reader.close() == []


def test_one_trailing_cr_removed() -> None:
    reader = LineReader()
    assert reader.feed(b"a\r\nb\r\r\nc\r") == [b"a", b"b\r"]
    assert reader.feed(b"\n") == [b"c"]
    assert reader.feed(b"d\r") == []
    assert reader.close() == [b"d"]


def test_a_read_of_whole_lines_is_known_by_itself() -> None:
    """`whole`: the read's lines are exactly what `feed` returns, so a reader may take them from the read."""
    reader = LineReader(max_bytes=12)
    assert reader.whole(b"a\nbc\n") and reader.feed(b"a\nbc\n") == [b"a", b"bc"]
    assert not reader.whole(b"a\nb")  # unterminated
    assert not reader.whole(b"a\r\n")  # a CR to remove
    assert not reader.whole(b"a\n" * 7)  # longer than the bound
    assert reader.feed(b"a\nb") == [b"a"]
    assert not reader.whole(b"c\n")  # it completes a pending line
    assert reader.feed(b"c\n") == [b"bc"] and reader.whole(b"d\n")


def test_multibyte_utf8_split_between_chunks() -> None:
    text = "héllo → wörld\n".encode()
    reader = LineReader()
    assert feed_all(reader, *(text[i : i + 1] for i in range(len(text)))) == ["héllo → wörld".encode()]


def test_oversized_line_is_dropped_then_reading_recovers() -> None:
    reader = LineReader(max_bytes=10)
    assert reader.feed(b"x" * 11 + b"\nok\n") == [Overflow(11, b"x" * 11), b"ok"]
    # the same when the runaway line spans chunks: nothing is buffered past the cap but the head
    assert feed_all(reader, b"y" * 8, b"y" * 8, b"y" * 8, b"yy\nafter\n") == [Overflow(26, b"y" * 16), b"after"]


def test_an_oversized_line_keeps_its_head_for_the_answer() -> None:
    reader = LineReader(max_bytes=HEAD_BYTES * 2)
    line = b'{"id":41,"method":"x","params":"' + b"p" * HEAD_BYTES * 3 + b'"}'
    (overflow,) = feed_all(reader, line[:100], line[100:], b"\n")
    assert overflow == Overflow(len(line), line[:HEAD_BYTES])
    assert recover_id(overflow.head) == 41


def test_oversized_unterminated_tail_is_dropped_silently() -> None:
    reader = LineReader(max_bytes=10)
    assert feed_all(reader, b"ok\n" + b"z" * 7, b"z" * 7) == [b"ok"]
    assert reader.close() == []


def test_cap_is_inclusive_and_counts_the_cr() -> None:
    reader = LineReader(max_bytes=10)
    assert reader.feed(b"a" * 10 + b"\n") == [b"a" * 10]
    assert reader.feed(b"a" * 9 + b"\r\n") == [b"a" * 9]
    assert reader.feed(b"a" * 10 + b"\r\n") == [Overflow(11, b"a" * 10 + b"\r")]
    assert reader.feed(b"b" * 11 + b"\n") == [Overflow(11, b"b" * 11)]
    assert feed_all(reader, b"c" * 10, b"\n") == [b"c" * 10]
    reader.feed(b"d" * 10)
    assert reader.close() == [b"d" * 10]


_line = st.binary(max_size=24).map(lambda b: b.replace(b"\n", b"."))


@given(
    lines=st.lists(_line, max_size=12),
    tail=_line,
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_chunking_never_changes_the_lines(lines: list[bytes], tail: bytes, cuts: list[int]) -> None:
    cap = 12
    stream = b"".join(line + b"\n" for line in lines) + tail
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = LineReader(max_bytes=cap)
    got = feed_all(reader, *(stream[a:b] for a, b in itertools.pairwise(points)))
    got.extend(reader.close())
    got = [Overflow(item.size) if isinstance(item, Overflow) else item for item in got]  # heads vary with chunking
    expected: list[bytes | Overflow] = [
        Overflow(len(line)) if len(line) > cap else line.removesuffix(b"\r") for line in lines
    ]
    if tail and len(tail) <= cap:
        expected.append(tail.removesuffix(b"\r"))
    assert got == expected

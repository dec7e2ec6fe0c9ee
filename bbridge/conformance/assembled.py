"""Checks over everything a run assembled (protocol.md §7.3 `events/schema-valid`, §7.5, §7.6 icons).

They read the clients' logs after the groups finished, so one event stream
from several bridge processes is judged at once, in a fixed client order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from bbridge.conformance.fixture import Fixture
from bbridge.conformance.results import Result, failed, passed, skipped
from bbridge.core import guard
from bbridge.core.assembler import CLOSES_ONCE, OPENS_BEFORE_CLOSE
from bbridge.core.events import encode_event
from bbridge.daemon import mistakes
from bbridge.replay.bridge_client import BridgeClient
from bbridge.wire.schema import ThreadEvent

GRAMMAR = guard.RULES
SUSPECTS = (OPENS_BEFORE_CLOSE, CLOSES_ONCE)  # closes the grammar lets pass; bbridge's own rules
SCHEMA = "events/schema-valid"
ICONS = "presentation/icon-namespaced-declared"


def grammar_results(clients: Sequence[BridgeClient]) -> list[Result]:
    entries = [e for c in clients for e in c.log if e.kind == "event"]
    if not entries:
        return [skipped(rule, "no assembled events to check") for rule in GRAMMAR]
    results = []
    for rule in GRAMMAR:
        broken = [(e.violation, e.hint) for e in entries if e.violation is not None and e.violation.rule == rule]
        if broken:
            violation, hint = broken[0]
            results.append(failed(rule, f"{len(broken)} violation(s); first: {violation.reason}.{hint}"))
        else:
            results.append(passed(rule, "no assembled event breaks it"))
    return results


def suspect_results(clients: Sequence[BridgeClient]) -> list[Result]:
    """The closes the assembler noted as suspect (`Assembler.suspects`), worded with the bridge's item key."""
    if not any(e.kind == "event" for c in clients for e in c.log):
        return [skipped(rule, "no assembled events to check") for rule in SUSPECTS]
    results = []
    for rule in SUSPECTS:
        found = [s for c in clients for s in c.assembler.suspects if s.rule == rule]
        if found:
            results.append(failed(rule, f"{len(found)} close(s); first: {mistakes.suspect_message(found[0])}"))
        else:
            results.append(passed(rule, "every close settles an open item, once"))
    return results


def schema_result(clients: Sequence[BridgeClient]) -> Result:
    """`events/schema-valid`; a `thread/delta` the grammar rejects counts too: it yields no valid events."""
    bad: list[str] = []
    for client in clients:
        for entry in client.log:
            if entry.kind == "invalid-delta":
                params = msgspec.json.encode(entry.message.get("params")).decode()
                bad.append(f"invalid thread/delta ({entry.reason}): {params[:400]}")
            elif entry.kind == "event":
                data = encode_event(entry.event)
                try:
                    msgspec.json.decode(data, type=ThreadEvent)
                except msgspec.ValidationError as exc:
                    bad.append(f"{{threadId: {entry.thread_id!r}, event: {data.decode()[:400]}}} ({exc})")
    if bad:
        return failed(SCHEMA, f"{len(bad)} invalid; first: {bad[0]}")
    return passed(SCHEMA, "every assembled event parses as ThreadEvent")


def _glyphs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        presentation = value.get("presentation")
        if isinstance(presentation, dict) and isinstance(presentation.get("icon"), dict):
            glyph = presentation["icon"].get("glyph")
            if isinstance(glyph, str):
                yield glyph
        for child in value.values():
            yield from _glyphs(child)
    elif isinstance(value, list):
        for child in value:
            yield from _glyphs(child)


def icon_result(fixture: Fixture, clients: Sequence[BridgeClient]) -> Result:
    if fixture.icons is None:
        return skipped(ICONS, "the fixture declares no icons (no result)")
    plugin, names = fixture.icons
    glyphs = [g for c in clients for e in c.events() for g in _glyphs(msgspec.to_builtins(e)) if "/" in g]
    for glyph in glyphs:
        namespace, _, name = glyph.partition("/")
        if namespace != plugin or name not in names:
            return failed(ICONS, f"icon glyph {glyph!r} is not one of {plugin!r}'s declared icons {sorted(names)}")
    return passed(ICONS, f"{len(glyphs)} namespaced glyph(s), all declared by {plugin!r}")

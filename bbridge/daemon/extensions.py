"""Plugin-declared extension payloads (daemon.md §2, §6).

An `extension` item or `extension.state` payload reaches clients only when
its kind is declared by the provider, it encodes to at most 64 KiB and it
validates against the declared JSON Schema; otherwise a `provider/unhandled`
event takes its slot, carrying the payload. jsonschema runs only for events
that carry an extension payload, never per delta.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import msgspec
import structlog

from bbridge.core.events import Event
from bbridge.daemon.config import ExtensionKind

MAX_PAYLOAD_BYTES = 64 * 1024
# the event types `ExtensionChecker.check` looks into; it returns every other unchanged
CHECKED_TYPES = frozenset({"thread/extensionState/updated", "item/started", "item/completed"})

log = structlog.get_logger("bbridge.daemon.extensions")


class ExtensionChecker:
    def __init__(self, provider_id: str, kinds: dict[str, ExtensionKind], *, allow_undeclared: bool = False) -> None:
        self.provider_id = provider_id
        self.allow_undeclared = allow_undeclared
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}
        for kind, schemas in kinds.items():
            for slot, schema in (("item", schemas.item), ("state", schemas.state)):
                if schema is None:
                    self._validators[(kind, slot)] = None
                    continue
                validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
                validator_class.check_schema(schema)
                self._validators[(kind, slot)] = validator_class(schema)

    def check(self, event: Event) -> Event:
        """The event itself, or the `provider/unhandled` that replaces it."""
        kind = event["type"]
        if kind == "thread/extensionState/updated":
            problem = self._problem(event["kind"], "state", event["payload"])
        elif (kind == "item/started" or kind == "item/completed") and event["item"]["type"] == "extension":
            item = event["item"]
            problem = self._problem(item["kind"], "item", item["payload"])
        else:
            return event
        if problem is None:
            return event
        log.warning(
            "extension payload refused", providerId=self.provider_id, threadId=event["threadId"], reason=problem
        )
        return {
            "type": "provider/unhandled",
            "threadId": event["threadId"],
            "providerThreadId": event.get("providerThreadId", ""),
            "providerId": self.provider_id,
            "rawType": f"extension/refused: {problem}",
            "rawEvent": {"jsonrpc": "2.0", "method": kind, "params": _strip_ids(event)},
            "scope": event["scope"],
        }

    def _problem(self, kind: str, slot: str, payload: Any) -> str | None:
        key = (kind, slot)
        if key not in self._validators and not self.allow_undeclared:
            return f"extension kind {kind!r} ({slot}) is not declared by provider {self.provider_id!r}"
        size = len(msgspec.json.encode(payload))
        if size > MAX_PAYLOAD_BYTES:
            return f"extension {slot} payload of {kind!r} is {size} bytes (limit {MAX_PAYLOAD_BYTES})"
        validator = self._validators.get(key)
        if validator is None:
            return None
        error = jsonschema.exceptions.best_match(validator.iter_errors(payload))
        if error is None:
            return None
        path = "/".join(str(part) for part in error.absolute_path) or "(root)"
        return f"extension {slot} payload of {kind!r} fails its schema at {path}: {error.message}"


def _strip_ids(event: Event) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in ("type", "threadId", "providerThreadId", "scope")}

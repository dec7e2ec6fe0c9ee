"""Client methods served by a room above the daemon (issue 48): a room (Perspectives) is a `seams.services.Service`
the daemon is handed (`Daemon(services=...)`); the daemon knows nothing else of it.

`Daemon.handle` routes a method one of its services names to that service, after its own methods and the bridge
methods. A room method the wire declares (`ROOM_METHODS`) reaches its service only with params its wire type
accepts (else `-32602` naming what is wrong, as the daemon's own methods answer), and no service serving it is
`-32601` saying what to configure. `daemon/status` carries each service's `report()` under its `name`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import structlog

from bbridge.core.scalars import Wire
from bbridge.seams.services import Service
from bbridge.wire import perspectives, rpc

log = structlog.get_logger("bbridge.daemon.services")


@dataclass(frozen=True)
class RoomMethod:
    """A client method a room serves: its params' wire type, and what makes a daemon serve it."""

    params: type[Wire]
    advice: str


PERSPECTIVES_ADVICE = "add a [perspectives] table to bbridge.toml"
# The client methods rooms serve (the OpenRPC document describes them with the same types).
ROOM_METHODS: Final[dict[str, RoomMethod]] = {
    "ai/complete": RoomMethod(perspectives.AiCompleteParams, PERSPECTIVES_ADVICE),
    "perspectives/runs": RoomMethod(perspectives.PerspectivesRunsParams, PERSPECTIVES_ADVICE),
}


class Services:
    """The daemon's services by method; refuses two that serve one method, or one that takes a daemon method or a
    `daemon/status` section."""

    def __init__(self, services: Sequence[Service], taken_methods: Collection[str], taken_sections: Collection[str]):
        self._services = list(services)
        self._by_method: dict[str, Service] = {}
        names: set[str] = set()
        for service in self._services:
            if service.name in names or service.name in taken_sections:
                raise ValueError(f"service {service.name!r}: its daemon/status section is taken")
            names.add(service.name)
            for method in service.methods:
                if method in self._by_method or method in taken_methods:
                    raise ValueError(f"service {service.name!r}: {method} is served already")
                self._by_method[method] = service

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        """The serving service's answer; a method none serves is `-32601` (a room's says what to configure)."""
        service, room = self._by_method.get(method), ROOM_METHODS.get(method)
        if service is None:
            if room is not None:
                raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"{method} is served by no room on this daemon: {room.advice}")
            raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")
        if room is not None:
            try:
                msgspec.convert(params, room.params)
            except msgspec.ValidationError as exc:
                raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method}: {exc}") from None
        return await service.handle(method, params)

    def report(self) -> dict[str, Any]:
        """Each service's report by name; a report that fails says so instead (status must not fail for it)."""
        reports: dict[str, Any] = {}
        for service in self._services:
            try:
                reports[service.name] = service.report()
            except Exception as exc:
                log.exception("a service's report failed", service=service.name)
                reports[service.name] = {"error": f"{type(exc).__name__}: {exc}"}
        return reports

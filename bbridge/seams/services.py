"""A room's client methods, as the daemon routes them (`daemon/services.py`): a room above the daemon
(Perspectives) implements `Service` and is handed to `Daemon(services=...)`."""

from __future__ import annotations

from typing import Any, Protocol


class Service(Protocol):
    """A room's client methods, served in the daemon's process."""

    name: str  # its `daemon/status` section
    methods: frozenset[str]  # the client methods it serves

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        """One request's result (JSON-ready); raises `rpc.RpcError` for an error the client gets as it is."""
        ...

    def report(self) -> dict[str, Any]:
        """For `daemon/status`, under `name`."""
        ...

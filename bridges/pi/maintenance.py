"""The maintenance methods pi has (pi-bridge.md [M6], [M7]): `provider/health` and `provider/usage`.

pi keeps its auth and models itself, so health is whether pi lists any model for the cwd (from the same throwaway
child `model/list` asks); usage is not reported. `provider/installation/*` stay unknown methods ([D3]), which is
why the bridge registers these two by name and not the kit's four (`Bridge.handle_maintenance`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from msgspec import UNSET

from bbridge.wire import protocol, rpc

NO_MODELS = "Pi has no authenticated model provider available."


class Maintenance:
    """Health from pi's available models (`available(cwd)`, `RpcError` when pi cannot list them); no usage."""

    def __init__(self, available: Callable[[str], Awaitable[list[Any]]]) -> None:
        self.available = available

    async def health(self, params: protocol.MaintenanceParams) -> dict[str, Any]:
        cwd = os.path.abspath(params.cwd if params.cwd is not UNSET else os.getcwd())
        try:
            count = len(await self.available(cwd))
            status, message = ("ready", None) if count else ("unauthenticated", NO_MODELS)
        except rpc.RpcError as exc:
            status, message = "unknown", exc.message
        health = {
            "status": status, "statusMessage": message, "accountEmail": None, "planLabel": None,
            "installedVersion": None, "minimumSupportedVersion": None, "canInstall": False, "canUpdate": False,
            "loginCommand": None,
        }  # fmt: skip
        return {"supported": True, "health": health}

    async def usage(self, params: protocol.MaintenanceParams) -> dict[str, Any]:
        return {"supported": False}

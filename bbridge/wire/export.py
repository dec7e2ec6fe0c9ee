"""What `bbridge schema --out DIR` writes: the wire's JSON Schemas (`schema`) and the daemon's client API as
OpenRPC (`openrpc`, built on `schema.components`). Here, above both, so neither imports the other back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bbridge.wire.openrpc import openrpc_document
from bbridge.wire.schema import SCHEMAS, Schema

DOCUMENTS: dict[str, Callable[[], Schema]] = {**SCHEMAS, "openrpc.json": openrpc_document}  # the client API's last


def write_schemas(out: Path) -> list[Path]:
    """Write every document under `out` (created if needed) and return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in DOCUMENTS.items():
        path = out / name
        path.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    return written

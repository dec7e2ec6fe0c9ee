"""Plugin bundles: `DIR/<name>/plugin.json`, naming an executable inside the bundle and a command template.

A directory without `plugin.json` is not a bundle and is passed over; a broken bundle is refused with its reason
and the others load. The template is split into argv with shlex *before* any argument is substituted, so an
argument is always exactly one argv element, whatever it holds.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import msgspec

from bbridge.config_file import Refusal
from bbridge.toolhost.declarations import NAME, HostedTool, Retry, check_retry, check_schema, no_parameters

MANIFEST = "plugin.json"


class Manifest(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str
    entry: str
    command: str
    version: str = ""
    defaults: dict[str, str] = {}
    schema: dict[str, Any] = msgspec.field(default_factory=no_parameters)
    enabled: bool | None = None  # absent: enabled; only an explicit false disables
    retry: Retry = Retry()


class Bundles(msgspec.Struct):
    """What a tools directory holds: its tools, its refused bundles, the names of its disabled ones."""

    tools: list[HostedTool]
    refused: list[Refusal]
    disabled: list[str]


def load_bundles(directory: Path) -> Bundles:
    """Every bundle under `directory`, in name order; a later bundle reusing a taken name is refused."""
    found = Bundles([], [], [])
    for bundle in sorted(directory.iterdir()):
        if not (bundle / MANIFEST).is_file():
            continue
        try:
            tool = _bundle(bundle)
        except _Broken as exc:
            found.refused.append(Refusal(str(bundle), None, str(exc)))
            continue
        if tool is None:
            found.disabled.append(str(bundle))
        elif any(known.name == tool.name for known in found.tools):
            found.refused.append(Refusal(str(bundle), None, f"tool name {tool.name!r} already taken by another bundle"))
        else:
            found.tools.append(tool)
    return found


class _Broken(Exception):
    """Why a bundle cannot be used."""


def _bundle(bundle: Path) -> HostedTool | None:
    try:
        manifest = msgspec.json.decode((bundle / MANIFEST).read_bytes(), type=Manifest)
    except (OSError, msgspec.DecodeError) as exc:
        raise _Broken(f"{MANIFEST}: {exc}") from None
    if manifest.enabled is False:
        return None
    if not NAME.fullmatch(manifest.name):
        raise _Broken(f"bad tool name {manifest.name!r} (expected 1 to 64 of A-Z a-z 0-9 _ -)")
    for key, problem in (("schema", check_schema(manifest.schema)), ("retry", check_retry(manifest.retry))):
        if problem is not None:
            raise _Broken(f"{key}: {problem}")
    entry = _entry(bundle, manifest.entry)
    try:
        command = shlex.split(manifest.command)
    except ValueError as exc:
        raise _Broken(f"command: {exc}") from None
    if not command:
        raise _Broken("command: empty")
    return HostedTool(
        name=manifest.name,
        description=manifest.description,
        schema=manifest.schema,
        command=command,
        source=str(bundle),
        defaults=manifest.defaults,
        bound={"entry": str(entry), "dir": str(bundle.resolve())},
        retry=manifest.retry,
    )


def _entry(bundle: Path, entry: str) -> Path:
    """The entry's absolute path: a plain file name, resolved (symlinks too) inside the bundle, executable."""
    if not entry or "/" in entry or "\\" in entry or "\0" in entry or ".." in entry or entry == ".":
        raise _Broken(f"entry {entry!r}: expected a plain file name inside the bundle (no '/', no '..')")
    home = bundle.resolve()
    path = (bundle / entry).resolve()
    if not path.is_relative_to(home):
        raise _Broken(f"entry {entry!r}: resolves to {path}, outside the bundle")
    if not path.is_file():
        raise _Broken(f"entry {entry!r}: missing (no such file in the bundle)")
    if not os.access(path, os.X_OK):
        raise _Broken(f"entry {entry!r}: not executable (chmod +x it)")
    return path

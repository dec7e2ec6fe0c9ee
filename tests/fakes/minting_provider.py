"""A provider CLI that mints fresh handles on every run, as the real Claude Code and codex CLIs do: a recorded cell's
provider lanes played by the replay harness's fake provider (`bbridge.replay.fake_agent`), with every UUID in them
(session and thread ids, message and turn ids: what the bridges make their checkpoints and provider thread ids of)
replaced by a fresh one for this run, the same recorded UUID by the same fresh one. The content is the recording's,
so two runs differ only in the handles the provider minted (tests/test_ci_recipe.py).

Usage: python minting_provider.py --recording CELL_DIR --dialect json-rpc|claude-cli --scratch DIR [CLI flags...]
(the flags a bridge passes the real CLI are ignored, as the fake provider ignores them). The re-minted cell and the
fake provider's state go in a new folder under DIR.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import uuid
from pathlib import Path

from bbridge.replay import fake_agent
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, lane_path

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def reminted(cell: Path, into: Path) -> Path:
    """A copy of the cell's provider lanes with every UUID replaced by a fresh one, consistently across both lanes."""
    fresh: dict[str, str] = {}
    into.mkdir(parents=True)
    for direction in (PROVIDER_TO_BRIDGE, BRIDGE_TO_PROVIDER):
        source = lane_path(cell, direction)
        if source.exists():
            text = source.read_text(encoding="utf-8")
            text = UUID.sub(lambda m: fresh.setdefault(m.group(0), str(uuid.uuid4())), text)
            lane_path(into, direction).write_text(text, encoding="utf-8")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--recording", type=Path, required=True)
    parser.add_argument("--dialect", required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    args, rest = parser.parse_known_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=args.scratch))
    cell = reminted(args.recording, run / "cell")
    fake_agent.main(["--recording", str(cell), "--dialect", args.dialect, "--state", str(run / "state"), *rest])


if __name__ == "__main__":
    main()

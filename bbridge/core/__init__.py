"""The pure core: delta grammar in, canonical ThreadEvents out, synchronously.

Holds the `thread/delta` grammar v3 types (`grammar`), the event and item
vocabulary (`events`, `items`), per-thread state (`state`), text coalescing and
progress throttling (`sink`), id minting (`ids`), the turn lifecycle (`turns`),
the assembler that wires them together (`assembler`) and the host-side grammar
guard (`guard`). No I/O, no clock reads (callers pass `now`), no trio, no
logging: the same input always gives the same output, which is what makes byte
parity and property tests possible. May import only the standard library and
msgspec; everything else in bbridge may import it.
"""

# Before any submodule: which core runs, compiled or pure (native.py; BBRIDGE_PURE=1 forces pure).
from bbridge.core import native as native

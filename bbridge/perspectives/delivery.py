"""What a run hands back: the launch receipt, the one message delivered to the calling thread, help's result.

The delivered text references only the final-result thread (the synthesis thread, or help's expert), once, at
its end. Every other internal thread id is scrubbed from what the models wrote first, in the odd forms a model
repeats one (`@thread:ID`, a Markdown-escaped `thr\\_x`, inside a link or a URL, another case), so a caller can
only reach the planner and the workers through that one thread. A failure's raw outputs are bounded, each and
together, fairly (short outputs give their unused share to long ones), and each cut is said where it happens.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from bbridge.client import CLIENT_REQUEST_ID_ALPHABET
from bbridge.perspectives.prompts import Evidence, Status

RUN_ID_PREFIX: Final = "prun_"
RUN_ID: Final = re.compile(rf"{RUN_ID_PREFIX}[{CLIENT_REQUEST_ID_ALPHABET}]{{10}}\Z")
RESULT_HEAD: Final = "Perspectives panel result"
FAILED_HEAD: Final = "Perspectives panel failed"
PLANNER_FALLBACK_NOTE: Final = "The planner failed twice, so each lens was given a built-in expert prompt."
INTERNAL: Final = "[internal thread]"  # what a scrubbed reference reads as
PARTIAL_CHARS: Final = 12_000  # a failed run's partial synthesis
RAW_EACH_CHARS: Final = 6_000  # one raw perspective output
RAW_TOTAL_CHARS: Final = 20_000  # all of them


@dataclass(frozen=True)
class Member:
    """One lens's worker as the delivery shows it, in lens order (its place is its "Perspective N")."""

    lens: str
    provider_id: str
    model: str | None
    status: Status


def new_run_id() -> str:
    """A run's id: `prun_` and 10 random characters of the `clientRequestId` alphabet (no 0, 1, l or o)."""
    return RUN_ID_PREFIX + "".join(secrets.choice(CLIENT_REQUEST_ID_ALPHABET) for _ in range(10))


def receipt(run_id: str, lenses: Sequence[str]) -> str:
    """`gather_perspectives`'s result text: the run launched, its result to come as a later message."""
    return json.dumps({"runId": run_id, "lenses": list(lenses), "status": "launched"}, ensure_ascii=False)


def panel_result(
    run_id: str,
    synthesis_text: str,
    final_thread_id: str,
    members: Sequence[Member],
    *,
    hidden_thread_ids: Collection[str],
    notes: Sequence[str] = (),
) -> str:
    """The delivery of a run whose synthesis finished: the synthesis (scrubbed), the notes (`PLANNER_FALLBACK_NOTE`),
    the members' table, then the synthesis thread."""
    scrubbed = scrub(synthesis_text, [*hidden_thread_ids, final_thread_id]).strip()
    parts = [f"{RESULT_HEAD} (run {run_id})", scrubbed or "(the synthesis is empty)", *notes]
    if members:
        parts.append(members_table(members))
    parts.append(f"Synthesis thread: `{final_thread_id}`")
    return "\n\n".join(parts) + "\n"


def panel_failed(
    run_id: str,
    reason: str,
    partial_synthesis: str | None,
    raw_outputs: Sequence[Evidence],
    members: Sequence[Member] = (),
    *,
    hidden_thread_ids: Collection[str],
    final_thread_id: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The delivery of a run whose synthesis did not finish: why, the partial synthesis if any, the bounded raw
    outputs (labelled as the table numbers them), the table, and the synthesis thread when one was created."""
    ids = [*hidden_thread_ids, *([final_thread_id] if final_thread_id else [])]
    parts = [f"{FAILED_HEAD} (run {run_id}): {scrub(reason, ids).strip() or 'unknown error'}", *notes]
    partial = scrub(partial_synthesis or "", ids).strip()
    if partial:
        text, cut = _bound(partial, PARTIAL_CHARS)
        parts.append(f"## Partial synthesis\n\n{text}{_cut_note(cut, len(partial))}")
    else:
        parts.append("## Partial synthesis\n\n(none)")
    parts.append(_raw_section(raw_outputs, ids))
    if members:
        parts.append(members_table(members))
    if final_thread_id:
        parts.append(f"Synthesis thread: `{final_thread_id}`")
    return "\n\n".join(parts) + "\n"


def help_result(answer: str, expert_thread_id: str | None, *, hidden_thread_ids: Collection[str]) -> str:
    """help's tool result: the expert's answer (scrubbed), then its thread."""
    ids = [*hidden_thread_ids, *([expert_thread_id] if expert_thread_id else [])]
    text = scrub(answer, ids).strip() or "(the expert gave no answer)"
    return f"{text}\n\nExpert thread: `{expert_thread_id}`\n" if expert_thread_id else f"{text}\n"


def members_table(members: Sequence[Member]) -> str:
    """Which agent answered which lens, and how each ended: the key to "Perspective N"."""
    rows = ["| Perspective | Lens | Agent | Status |", "| --- | --- | --- | --- |"]
    for number, member in enumerate(members, 1):
        agent = f"{member.provider_id} ({member.model or 'provider default'})"
        rows.append(f"| {number} | {_cell(member.lens)} | {_cell(agent)} | {member.status} |")
    return "\n".join(rows)


# -- scrubbing -----------------------------------------------------------------------

_INVISIBLE: Final = "[\u00ad\u200b-\u200f\u2060\ufeff]*"  # soft hyphen, zero-width and direction marks
_ID_EDGE: Final = r"[A-Za-z0-9_-]"


def scrub(text: str, thread_ids: Collection[str]) -> str:
    """`text` without any of `thread_ids`: each reference (`@thread:ID`, `thread ID`, `` `ID` ``, `thr\\_x`, any
    case, with invisible characters inside) becomes `[internal thread]`, a link to one keeps only its text, a URL
    holding one goes whole. Only the ids the text can hold are matched (`_present`: compiling each id's patterns
    costs ~2 ms, on the event loop)."""
    for thread_id in sorted(_present(text, {t for t in thread_ids if t}), key=len, reverse=True):
        core = _id_pattern(thread_id)
        text = re.sub(rf"\[([^\]\n]*)\]\(<?[^)\s]*?{core}[^)\s]*\)", r"\1", text, flags=re.IGNORECASE)
        text = re.sub(rf"<?(?:[a-z][a-z0-9+.-]*://|www\.)[^\s<>()]*?{core}[^\s<>()]*>?", INTERNAL, text, flags=re.I)
        text = _reference(core).sub(INTERNAL, text)
    return text


_INVISIBLE_CHARS: Final = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u200e\u200f\u2060\ufeff\\"))
# the characters case-insensitive matching folds to an ASCII letter (Kelvin sign, long s, dotted and dotless i)
_FOLDS: Final = {0x212A: "k", 0x17F: "s", 0x130: "i", 0x131: "i"}


def _present(text: str, thread_ids: set[str]) -> list[str]:
    """The ids `text` may hold, as `_id_pattern` would find them: the text without invisible characters and
    Markdown escapes, its letters folded as case-insensitive matching folds them."""
    folded = text.translate({**_INVISIBLE_CHARS, **_FOLDS}).lower()
    return [thread_id for thread_id in thread_ids if thread_id.translate(_FOLDS).lower() in folded]


def _id_pattern(thread_id: str) -> str:
    """The id, any case, each character possibly Markdown-escaped and followed by invisible characters."""
    chars = [rf"\\?{re.escape(char)}" if not char.isalnum() else re.escape(char) for char in thread_id]
    return f"(?<!{_ID_EDGE}){_INVISIBLE.join(chars)}(?!{_ID_EDGE})"


def _reference(core: str) -> re.Pattern[str]:
    """A reference to the id: an optional `@`, `thread`, `thread id:` lead, optional quotes or backticks around."""
    lead = r"(?:@?(?<![\w-])threads?(?:[ _-]?id)?[ \t]*[:=#/]?[ \t]*)?@?"
    return re.compile(rf"{lead}[`'\"<]?{core}[`'\">]?", re.IGNORECASE)


# -- bounding --------------------------------------------------------------------------


def _raw_section(outputs: Sequence[Evidence], ids: Collection[str]) -> str:
    if not outputs:
        return "## Raw perspective outputs\n\n(none)"
    texts = [scrub(item.text, ids).strip() for item in outputs]
    cap = _fair_cap([len(text) for text in texts], RAW_EACH_CHARS, RAW_TOTAL_CHARS)
    blocks = [
        f"Each output is shown up to {RAW_EACH_CHARS:,} characters and all of them up to {RAW_TOTAL_CHARS:,}; "
        "a cut is marked where it happens."
    ]
    for number, (item, text) in enumerate(zip(outputs, texts, strict=True), 1):
        shown, cut = _bound(text, cap)
        body = (shown + _cut_note(cut, len(text))) if text else "(no output)"
        blocks.append(f"### Perspective {number}: {_one_line(item.lens)} ({item.status})\n\n{body}")
    return "## Raw perspective outputs\n\n" + "\n\n".join(blocks)


def _fair_cap(lengths: Sequence[int], each: int, total: int) -> int:
    """The largest per-output cap (at most `each`) under which all of them fit in `total`."""
    remaining = total
    ordered = sorted(lengths)
    for index, length in enumerate(ordered):
        share = remaining // (len(ordered) - index)
        if min(length, each) > share:
            return share
        remaining -= min(length, each)
    return each


def _bound(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to at most `limit` characters (at a line end when one is near) and how many were cut."""
    if len(text) <= limit:
        return text, 0
    head = text[:limit]
    newline = head.rfind("\n")
    if newline >= limit * 4 // 5:
        head = head[:newline]
    head = head.rstrip()
    return head, len(text) - len(head)


def _cut_note(cut: int, length: int) -> str:
    return f"\n\n[cut: {cut:,} of {length:,} characters not shown]" if cut else ""


def _cell(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def _one_line(text: str) -> str:
    return " ".join(text.split())

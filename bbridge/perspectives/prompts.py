"""The texts the hidden threads are given: the planner's request and its schema, the experts' prompts, the
wrap-up steer and the synthesizer's prompt; and the planner's answer read.

Every hidden thread is told to do read-only advisory work: the permission mode it runs under stays its real
authority, so this is a policy, not a sandbox. A worker's prompt holds the question, the context and its own lens
only, so the answers are independent. With `anonymous`, the synthesizer sees "Perspective 1..n": the labels
carry no agent, and the names of the members' providers and models (`withheld`) are masked where an answer uses
them as words (not inside a path, link or identifier, which a citation needs kept); the question, the context and
the lenses are the caller's own words and pass as given.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

Status = Literal["completed", "partial", "failed", "timed_out"]
LENSES_MIN: Final = 2
LENSES_MAX: Final = 7
HELP_LENS: Final = "a direct, concise answer to the question as asked"  # help's one planned prompt
WITHHELD: Final = "[agent name withheld]"
STATUS_MEANING: Final[dict[str, str]] = {
    "completed": "finished its answer",
    "partial": "did not finish within the panel phase; this is its output so far",
    "failed": "failed; this is whatever it wrote before failing",
    "timed_out": "ran out of time; this is whatever it wrote before it was stopped",
}

READ_ONLY: Final = (
    "This is read-only advisory work: inspect whatever you need, but do not modify files, repositories or any "
    "external system, and do not run commands that change state."
)
CITATIONS: Final = (
    "Cite every material factual claim inline, from primary evidence you actually inspected: a clickable "
    "file-and-line link for local repository evidence (for example [src/app.py:42](src/app.py#L42)) and a direct "
    "Markdown link for web or documentation sources. Keep what the supplied context says, and what you infer, "
    "apart from what you verified yourself, and say which is which. Never invent a citation."
)


class PlanError(ValueError):
    """The planner's answer does not give exactly one prompt per lens; the message says what is wrong."""


@dataclass(frozen=True)
class Evidence:
    """One member's outcome for the synthesizer: `label` names it when not anonymous (an agent's name)."""

    label: str
    lens: str
    status: Status
    text: str


def check_lenses(lenses: Sequence[str]) -> tuple[str, ...]:
    """The tool's lenses, stripped: 2 to 7, non-empty, distinct (a lens names its prompt and its worker)."""
    stripped = tuple(lens.strip() for lens in lenses)
    if not LENSES_MIN <= len(stripped) <= LENSES_MAX:
        raise ValueError(f"lenses: expected {LENSES_MIN} to {LENSES_MAX}, got {len(stripped)}")
    if not all(stripped):
        raise ValueError("lenses: expected non-empty strings")
    counts = Counter(map(_key, stripped))
    repeated = sorted({lens for lens in stripped if counts[_key(lens)] > 1})
    if repeated:
        raise ValueError(f"lenses: each must be distinct; repeated: {', '.join(map(repr, repeated))}")
    return stripped


# -- the planner -------------------------------------------------------------------


def planner_prompt(question: str, context: str | None, lenses: Sequence[str]) -> str:
    """The planner's request: one bespoke expert prompt per lens, as `{"prompts": [{"lens", "prompt"}]}`."""
    listed = "\n".join(f"- {msgspec.json.encode(lens).decode()}" for lens in lenses)
    return (
        "You plan the work of independent experts. Write one bespoke expert prompt for each lens below. Each "
        "expert sees only the question, the context and its own lens, works alone, and answers from evidence it "
        "inspects itself. A prompt says what that expert should examine and what its answer should cover, through "
        "its lens only; it must not mention the other lenses. Do not answer the question yourself. "
        f"{READ_ONLY}\n\n"
        f"{_question(question, context)}\n\n"
        f"Lenses ({len(lenses)}):\n{listed}\n\n"
        'Answer with a JSON object only: {"prompts": [{"lens": "<the lens exactly as written above>", '
        '"prompt": "<the expert prompt>"}]}, exactly one entry per lens.'
    )


def plan_schema(lenses: Sequence[str]) -> dict[str, Any]:
    """The JSON Schema of the planner's answer (`ai/complete`'s `outputSchema`)."""
    return {
        "type": "object",
        "properties": {
            "prompts": {
                "type": "array",
                "minItems": len(lenses),
                "maxItems": len(lenses),
                "items": {
                    "type": "object",
                    "properties": {
                        "lens": {"type": "string", "enum": list(lenses)},
                        "prompt": {"type": "string", "minLength": 1},
                    },
                    "required": ["lens", "prompt"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["prompts"],
        "additionalProperties": False,
    }


def parse_plan(value: Any, lenses: Sequence[str]) -> tuple[str, ...]:
    """The planned prompts in lens order, or a `PlanError`: a lens missing, repeated or not asked for, a blank
    prompt. A lens is matched exactly, else ignoring case and runs of spaces (a model's small slips)."""
    if isinstance(value, str | bytes):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            raise PlanError("not a JSON object") from None
    entries = value.get("prompts") if isinstance(value, dict) else None
    if not isinstance(entries, list):
        raise PlanError('expected {"prompts": [{"lens", "prompt"}]}')
    by_key = {_key(lens): lens for lens in lenses}
    planned: dict[str, str] = {}
    for index, entry in enumerate(entries):
        lens, prompt = (entry.get("lens"), entry.get("prompt")) if isinstance(entry, dict) else (None, None)
        if not isinstance(lens, str) or not isinstance(prompt, str):
            raise PlanError(f"prompts[{index}]: expected {{lens, prompt}} strings")
        asked = lens if lens in lenses else by_key.get(_key(lens))
        if asked is None:
            raise PlanError(f"prompts[{index}]: lens {lens!r} was not asked for")
        if asked in planned:
            raise PlanError(f"prompts[{index}]: lens {asked!r} repeated")
        if not prompt.strip():
            raise PlanError(f"prompts[{index}]: lens {asked!r} has a blank prompt")
        planned[asked] = prompt.strip()
    missing = [lens for lens in lenses if lens not in planned]
    if missing:
        raise PlanError(f"no prompt for lens {', '.join(map(repr, missing))}")
    return tuple(planned[lens] for lens in lenses)


def builtin_prompt(lens: str) -> str:
    """The expert prompt a lens gets when the planner failed twice (`worker_prompt` adds the question and the
    context, as it does to a planned one)."""
    return (
        f"You are an expert examining the question strictly through one lens: {lens}. Investigate the material "
        "the question concerns (code, documents, sources) as that lens directs, establish what is actually true "
        "there, and answer with findings, their evidence, the risks or trade-offs they imply and concrete "
        "recommendations. Say plainly what you could not establish."
    )


# -- the experts -------------------------------------------------------------------


def worker_prompt(expert_prompt: str, question: str, context: str | None, lens: str) -> str:
    """A panel worker's prompt: its expert prompt, the question, the context and its own lens, nothing of the
    others."""
    return (
        f"{expert_prompt.strip()}\n\n"
        f"{_question(question, context)}\n\n"
        f"Your lens: {lens}\n"
        "Answer through this lens. Other experts cover other angles independently; you will not see their work.\n\n"
        f"Rules:\n- {READ_ONLY}\n- {CITATIONS}\n"
        "- Do not say which agent, model or provider you are.\n"
        "- End with a short list of the claims you could not verify."
    )


def expert_prompt(planned: str, question: str, context: str | None) -> str:
    """help's expert's prompt: a concise, read-only answer, its evidence cited."""
    return (
        f"{planned.strip()}\n\n"
        f"{_question(question, context)}\n\n"
        "Answer concisely: lead with the answer, then only the evidence and caveats that matter.\n\n"
        f"Rules:\n- {READ_ONLY}\n- {CITATIONS}"
    )


def wrapup_steer() -> str:
    """The one steer an unfinished worker gets at `wrapup_s`."""
    return (
        "Time is nearly up for this panel. Stop investigating now and write your final answer from what you have "
        "already established: keep your citations, mark what is unverified or unfinished, and do not start new "
        "work. Anything you have not written when the phase ends is lost."
    )


# -- the synthesis -----------------------------------------------------------------


def synthesis_prompt(
    question: str,
    context: str | None,
    evidence: Sequence[Evidence],
    *,
    anonymous: bool = True,
    withheld: Collection[str] = (),
    thread_refs: Sequence[str] = (),
) -> str:
    """The synthesizer's prompt: every usable outcome with its status, how to merge them, and (as inspectability
    metadata it must not repeat) the run's internal thread references. With `anonymous` the labels are
    "Perspective 1..n" and the `withheld` names (the members' providers and models) are masked in the answers."""
    mask = _masker(withheld) if anonymous else None
    blocks: list[str] = []
    for number, item in enumerate(evidence, 1):
        label = f"Perspective {number}" if anonymous else item.label
        text = item.text.strip() or "(no output)"
        if mask is not None:
            text = mask(text)
        blocks.append(
            f"### {label}\nLens: {item.lens}\nStatus: {item.status} ({STATUS_MEANING[item.status]})\n\n{text}"
        )
    body = "\n\n".join(blocks) or "(no perspective produced any output)"
    refs = ""
    if thread_refs:
        listed = "\n".join(f"- {ref}" for ref in thread_refs)
        refs = (
            "\n\nInternal threads of this run (inspectability metadata for whoever audits it; never repeat, link or "
            f"mention these references in your answer):\n{listed}"
        )
    return (
        "You synthesize the independent answers of a panel of experts, each of whom examined the question through "
        f"one lens. {READ_ONLY}\n\n"
        f"{_question(question, context)}\n\n"
        "Write one answer to the question that merges every usable perspective below:\n"
        "- Keep the experts' inline citations (file-and-line links, Markdown links) with the claims they support, "
        "and deduplicate them; never invent a citation or a source nobody gave.\n"
        "- Name claims without supporting evidence as evidence gaps, in a short section of their own.\n"
        "- Where perspectives disagree, say so and weigh their evidence.\n"
        "- A perspective that did not complete is still evidence: use it, with the care its status calls for.\n"
        "- Refer to a perspective by its label"
        + (" only; do not guess which agent or model wrote it" if anonymous else "")
        + ".\n\n"
        f"## Perspectives ({len(evidence)})\n\n{body}{refs}"
    )


# -- helpers -----------------------------------------------------------------------


def _question(question: str, context: str | None) -> str:
    context_text = context.strip() if context and context.strip() else "(none given)"
    return f"Question:\n{question.strip()}\n\nContext supplied by the caller:\n{context_text}"


def _key(lens: str) -> str:
    return " ".join(lens.split()).casefold()


_BEFORE: Final = r"[\w/\\@.#-]"  # what a name inside a path, link, handle or identifier follows
_AFTER: Final = r"[\w/\\@#-]|\.\w"  # or precedes (a full stop ends a sentence; `.py` goes on a path)


def _masker(names: Collection[str]) -> Callable[[str], str]:
    """A function masking `names` where a text uses them as words (case-insensitive), each also spelt with spaces
    for its `-` and `_` (`claude-code` is also "Claude Code")."""
    spelt = {variant for name in names for variant in (name, name.replace("-", " ").replace("_", " "))}
    words = sorted({word.strip() for word in spelt if word.strip()}, key=len, reverse=True)
    if not words:
        return lambda text: text
    alternatives = "|".join(re.escape(word) for word in words)
    pattern = re.compile(rf"(?<!{_BEFORE})(?:{alternatives})(?!{_AFTER})", re.IGNORECASE)

    def mask(text: str) -> str:
        return pattern.sub(WITHHELD, text)

    return mask

"""The Perspectives texts (issue 48): the planner's request, schema and answer read; the experts' prompts (read-only,
cited, their own lens only); the synthesizer's prompt (statuses disclosed, citations kept, and with `anonymous` no
provider or model name); and the delivery: the receipt, the run id, the one message, the scrubbing of every
internal thread id however a model repeated it, the bounded raw outputs of a failure."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from bbridge.perspectives.delivery import (
    FAILED_HEAD,
    INTERNAL,
    PLANNER_FALLBACK_NOTE,
    RAW_EACH_CHARS,
    RAW_TOTAL_CHARS,
    RESULT_HEAD,
    RUN_ID,
    Member,
    help_result,
    members_table,
    new_run_id,
    panel_failed,
    panel_result,
    receipt,
    scrub,
)
from bbridge.perspectives.prompts import (
    HELP_LENS,
    WITHHELD,
    Evidence,
    PlanError,
    builtin_prompt,
    check_lenses,
    expert_prompt,
    parse_plan,
    plan_schema,
    planner_prompt,
    synthesis_prompt,
    worker_prompt,
    wrapup_steer,
)

LENSES = ("v8 performance characteristics", "big-O complexity", "duplicate work")
QUESTION = "Where is the performance work in this implementation?"
CONTEXT = "Focus on behavior that matters under production load."
PLAN = {"prompts": [{"lens": lens, "prompt": f"Examine {lens}."} for lens in LENSES]}


# -- lenses ---------------------------------------------------------------------------------


def test_lenses_are_two_to_seven_distinct_non_empty_strings() -> None:
    assert check_lenses([" a ", "b"]) == ("a", "b")
    assert len(check_lenses([str(n) for n in range(7)])) == 7
    for bad, reason in [
        (["a"], "expected 2 to 7, got 1"),
        ([str(n) for n in range(8)], "expected 2 to 7, got 8"),
        (["a", "  "], "non-empty"),
        (["Big O", "big  o", "c"], "repeated: 'Big O', 'big  o'"),
    ]:
        with pytest.raises(ValueError, match=re.escape(reason)):
            check_lenses(bad)


# -- the planner ------------------------------------------------------------------------------


def test_the_planner_prompt_holds_the_question_context_and_every_lens() -> None:
    prompt = planner_prompt(QUESTION, CONTEXT, LENSES)
    assert QUESTION in prompt and CONTEXT in prompt
    assert all(f'- "{lens}"' in prompt for lens in LENSES)
    assert '{"prompts": [{"lens":' in prompt and "exactly one entry per lens" in prompt
    assert "read-only" in prompt and "do not modify files" in prompt


def test_the_planner_prompt_says_when_there_is_no_context() -> None:
    assert "Context supplied by the caller:\n(none given)" in planner_prompt(QUESTION, None, LENSES)
    assert "(none given)" in planner_prompt(QUESTION, "  ", LENSES)


def test_the_plan_schema_accepts_a_good_plan_and_rejects_a_bad_one() -> None:
    schema = plan_schema(LENSES)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(PLAN)
    assert not validator.is_valid({"prompts": PLAN["prompts"][:2]})
    assert not validator.is_valid({"prompts": [*PLAN["prompts"][:2], {"lens": "other", "prompt": "x"}]})
    assert not validator.is_valid({"prompts": PLAN["prompts"], "extra": 1})
    assert not validator.is_valid({"prompts": [{**p, "prompt": ""} for p in PLAN["prompts"]]})


def test_parse_plan_gives_the_prompts_in_lens_order() -> None:
    shuffled = {"prompts": list(reversed(PLAN["prompts"]))}
    assert parse_plan(shuffled, LENSES) == tuple(f"Examine {lens}." for lens in LENSES)
    assert parse_plan(json.dumps(PLAN), LENSES) == parse_plan(PLAN, LENSES)


def test_parse_plan_forgives_case_and_spacing_of_a_lens() -> None:
    value = {"prompts": [{"lens": " BIG-o   complexity", "prompt": "p2"}, *PLAN["prompts"][::2]]}
    assert parse_plan(value, LENSES)[1] == "p2"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"prompts": PLAN["prompts"][:2]}, "no prompt for lens 'duplicate work'"),
        (
            {"prompts": [*PLAN["prompts"], PLAN["prompts"][0]]},
            "prompts[3]: lens 'v8 performance characteristics' repeated",
        ),
        (
            {"prompts": [*PLAN["prompts"], {"lens": "security", "prompt": "x"}]},
            "prompts[3]: lens 'security' was not asked",
        ),
        (
            {"prompts": [{"lens": LENSES[0], "prompt": " "}]},
            "prompts[0]: lens 'v8 performance characteristics' has a blank",
        ),
        ({"prompts": [{"lens": LENSES[0]}]}, "prompts[0]: expected {lens, prompt} strings"),
        ({"prompts": ["x"]}, "prompts[0]: expected {lens, prompt} strings"),
        ({"plan": []}, 'expected {"prompts": [{"lens", "prompt"}]}'),
        (["x"], 'expected {"prompts"'),
        ("not json", "not a JSON object"),
        (None, 'expected {"prompts"'),
    ],
)
def test_parse_plan_refuses_a_bad_plan(value: Any, reason: str) -> None:
    with pytest.raises(PlanError, match=re.escape(reason)):
        parse_plan(value, LENSES)


# -- the experts --------------------------------------------------------------------------------


def test_a_worker_prompt_holds_its_own_lens_only() -> None:
    prompt = worker_prompt("You are a V8 expert.", QUESTION, CONTEXT, LENSES[0])
    assert prompt.startswith("You are a V8 expert.")
    assert QUESTION in prompt and CONTEXT in prompt and f"Your lens: {LENSES[0]}" in prompt
    assert LENSES[1] not in prompt and LENSES[2] not in prompt


def test_a_worker_is_told_to_work_read_only_and_cite_its_evidence() -> None:
    prompt = worker_prompt("p", QUESTION, None, LENSES[1])
    assert "do not modify files, repositories or any external system" in prompt
    assert "Cite every material factual claim inline, from primary evidence you actually inspected" in prompt
    assert "file-and-line link for local repository evidence" in prompt and "[src/app.py:42](src/app.py#L42)" in prompt
    assert "direct Markdown link for web or documentation sources" in prompt
    assert "apart from what you verified yourself" in prompt and "Never invent a citation" in prompt
    assert "Do not say which agent, model or provider you are" in prompt


def test_the_builtin_prompt_names_its_lens_and_feeds_a_worker_prompt() -> None:
    builtin = builtin_prompt(LENSES[2])
    assert LENSES[2] in builtin and LENSES[0] not in builtin
    prompt = worker_prompt(builtin, QUESTION, CONTEXT, LENSES[2])
    assert prompt.startswith(builtin) and QUESTION in prompt


def test_helps_expert_prompt_asks_for_a_concise_read_only_cited_answer() -> None:
    prompt = expert_prompt(builtin_prompt(HELP_LENS), QUESTION, CONTEXT)
    assert HELP_LENS in prompt and QUESTION in prompt and CONTEXT in prompt
    assert "Answer concisely" in prompt and "read-only" in prompt and "Cite every material factual claim" in prompt


def test_the_wrapup_steer_asks_for_the_final_answer_now() -> None:
    text = wrapup_steer()
    assert "Stop investigating now" in text and "final answer" in text and "keep your citations" in text


# -- the synthesis ----------------------------------------------------------------------------------

NAMES = ("claude-code", "codex", "pi", "opus", "gpt-5.1-codex", "pi/first", "Claude Code", "sonnet")
EVIDENCE = [
    Evidence(
        "claude-code (opus)",
        LENSES[0],
        "completed",
        "As Claude Code on opus I found hidden classes churn in [src/a.js:10](src/a.js#L10). "
        "Also see bridges/codex/session.py:12 and https://example.com/codex-docs. Codex. sonnet, PI!",
    ),
    Evidence("codex (gpt-5.1-codex)", LENSES[1], "partial", "Loop is O(n^2) [src/b.js:3](src/b.js#L3); gpt-5.1-codex"),
    Evidence("pi (pi/first)", LENSES[2], "timed_out", ""),
    Evidence("pi (pi/first)", "extra lens", "failed", "crashed after pi/first said hi"),
]


def test_an_anonymous_synthesis_prompt_names_no_provider_or_model() -> None:
    prompt = synthesis_prompt(QUESTION, CONTEXT, EVIDENCE, anonymous=True, withheld=NAMES)
    for number in range(1, 5):
        assert f"### Perspective {number}\n" in prompt
    prose = re.sub(r"\S*[/.#]\S*", "", prompt)  # paths and links, which a citation keeps whole
    for name in NAMES:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", prose, re.IGNORECASE) is None, name
    assert "claude-code (opus)" not in prompt and "codex (gpt-5.1-codex)" not in prompt
    assert "gpt-5.1-codex" not in prompt and "pi/first" not in prompt and "Claude Code" not in prompt
    assert f"{WITHHELD}. {WITHHELD}, {WITHHELD}!" in prompt
    assert f"As {WITHHELD} on {WITHHELD} I found" in prompt
    assert "[src/a.js:10](src/a.js#L10)" in prompt and "bridges/codex/session.py:12" in prompt  # citations kept
    assert "https://example.com/codex-docs" in prompt
    assert "do not guess which agent or model wrote it" in prompt


def test_a_provider_id_is_also_withheld_as_words() -> None:
    evidence = [Evidence("x", "l", "completed", "Claude Code thinks; claude_code and CLAUDE-CODE agree.")]
    prompt = synthesis_prompt(QUESTION, None, evidence, withheld=["claude-code", "claude_code"])
    assert f"{WITHHELD} thinks; {WITHHELD} and {WITHHELD} agree." in prompt


def test_an_anonymous_prompt_with_nothing_withheld_still_labels_by_number() -> None:
    prompt = synthesis_prompt(QUESTION, None, EVIDENCE[:2])
    assert "claude-code (opus)" not in prompt and "### Perspective 2\n" in prompt


def test_a_named_synthesis_prompt_labels_each_by_its_agent() -> None:
    prompt = synthesis_prompt(QUESTION, CONTEXT, EVIDENCE, anonymous=False, withheld=NAMES)
    assert "### claude-code (opus)\n" in prompt and "As Claude Code on opus" in prompt and WITHHELD not in prompt
    assert "do not guess" not in prompt


def test_the_synthesis_prompt_discloses_every_status_and_lens() -> None:
    prompt = synthesis_prompt(QUESTION, CONTEXT, EVIDENCE)
    assert f"Lens: {LENSES[0]}\nStatus: completed (finished its answer)" in prompt
    assert "Status: partial (did not finish within the panel phase; this is its output so far)" in prompt
    assert "Status: timed_out (ran out of time" in prompt and "Status: failed (failed" in prompt
    assert "### Perspective 3\nLens: duplicate work\nStatus: timed_out" in prompt and "(no output)" in prompt
    assert "## Perspectives (4)" in prompt


def test_the_synthesis_prompt_asks_to_keep_citations_and_name_gaps() -> None:
    prompt = synthesis_prompt(QUESTION, CONTEXT, EVIDENCE)
    assert QUESTION in prompt and CONTEXT in prompt
    assert "Keep the experts' inline citations" in prompt and "deduplicate them" in prompt
    assert "never invent a citation" in prompt and "as evidence gaps" in prompt
    assert "did not complete is still evidence" in prompt and "read-only" in prompt


def test_the_synthesis_prompt_lists_thread_refs_and_forbids_repeating_them() -> None:
    prompt = synthesis_prompt(QUESTION, CONTEXT, EVIDENCE, thread_refs=["thr_plan_1", "thr_work_2"])
    assert "- thr_plan_1\n- thr_work_2" in prompt
    assert "never repeat, link or mention these references in your answer" in prompt
    assert "Internal threads" not in synthesis_prompt(QUESTION, CONTEXT, EVIDENCE)


def test_a_synthesis_without_evidence_says_so() -> None:
    assert "(no perspective produced any output)" in synthesis_prompt(QUESTION, CONTEXT, [])


# -- receipt and run id --------------------------------------------------------------------------------


def test_the_receipt_is_the_exact_json_text() -> None:
    assert receipt("prun_abcdefghij", LENSES) == (
        '{"runId": "prun_abcdefghij", "lenses": ["v8 performance characteristics", "big-O complexity", '
        '"duplicate work"], "status": "launched"}'
    )
    assert json.loads(receipt("prun_x", ["é", 'a "q"'])) == {
        "runId": "prun_x",
        "lenses": ["é", 'a "q"'],
        "status": "launched",
    }


def test_run_ids_use_the_client_request_id_alphabet() -> None:
    ids = {new_run_id() for _ in range(200)}
    assert len(ids) == 200
    for run_id in ids:
        assert RUN_ID.match(run_id) and re.fullmatch(r"prun_[23456789a-km-np-z]{10}", run_id)


# -- scrubbing -------------------------------------------------------------------------------------------

HIDDEN = ["thr_prun_k2_planner", "thr_prun_k2_worker_1", "thr_prun_k2_worker_10"]


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("see thr_prun_k2_worker_1 now", f"see {INTERNAL} now"),
        ("see @thr_prun_k2_worker_1.", f"see {INTERNAL}."),
        ("@thread:thr_prun_k2_planner, then", f"{INTERNAL}, then"),
        ("the thread thr_prun_k2_planner said", f"the {INTERNAL} said"),
        ("(thread id: thr_prun_k2_worker_1)", f"({INTERNAL})"),
        ("thread_id=thr_prun_k2_worker_1;", f"{INTERNAL};"),
        ("in `thr_prun_k2_worker_10` too", f"in {INTERNAL} too"),
        ('"thr_prun_k2_worker_1"', INTERNAL),
        ("<thr_prun_k2_worker_1>", INTERNAL),
        ("THR_PRUN_K2_WORKER_1 shouted", f"{INTERNAL} shouted"),
        ("escaped thr\\_prun\\_k2\\_worker\\_1 here", f"escaped {INTERNAL} here"),
        ("hidden thr_prun\u200b_k2_wor\u2060ker_1 chars", f"hidden {INTERNAL} chars"),
        ("[the worker](http://127.0.0.1:8080/#/thread/thr_prun_k2_worker_1) found", "the worker found"),
        ("[thr_prun_k2_worker_1](/#/thread/thr_prun_k2_worker_1)", INTERNAL),
        ("at http://localhost:8080/thread/thr_prun_k2_worker_1?x=1 see", f"at {INTERNAL} see"),
        ("<https://host/t/thr_prun_k2_planner>", INTERNAL),
        ("run bbridge tail --thread thr_prun_k2_worker_1", f"run bbridge tail --thread {INTERNAL}"),
        ("subthread thr_prun_k2_worker_1", f"subthread {INTERNAL}"),
        ("thr_prun_k2_worker_10 and thr_prun_k2_worker_1", f"{INTERNAL} and {INTERNAL}"),
        ("thr_prun_k2_worker_100 is another thread", "thr_prun_k2_worker_100 is another thread"),
        ("xthr_prun_k2_worker_1 is a longer token", "xthr_prun_k2_worker_1 is a longer token"),
        ("nothing here", "nothing here"),
    ],
)
def test_scrub_removes_every_form_of_a_hidden_id(text: str, scrubbed: str) -> None:
    assert scrub(text, HIDDEN) == scrubbed


def test_scrub_ignores_empty_ids() -> None:
    assert scrub("a thread", ["", "thr_x"]) == "a thread"


# -- the delivered message -----------------------------------------------------------------------------

MEMBERS = [
    Member(LENSES[0], "claude-code", "opus", "completed"),
    Member(LENSES[1], "codex", None, "partial"),
    Member("pipes | and\nnewlines", "pi", "pi/first", "timed_out"),
]


def test_a_result_begins_with_its_head_and_references_only_the_synthesis_thread_once() -> None:
    synthesis = (
        "Hidden classes churn [src/a.js:10](src/a.js#L10), per @thr_prun_k2_worker_1 and thread "
        "thr_prun_k2_planner; my own thread is thr_syn_9."
    )
    text = panel_result("prun_abcdefghij", synthesis, "thr_syn_9", MEMBERS, hidden_thread_ids=HIDDEN)
    assert text.startswith(f"{RESULT_HEAD} (run prun_abcdefghij)\n\n")
    assert text.startswith("Perspectives panel result")
    for thread_id in HIDDEN:
        assert thread_id not in text
    assert text.count("thr_syn_9") == 1 and text.rstrip().endswith("Synthesis thread: `thr_syn_9`")
    assert "[src/a.js:10](src/a.js#L10)" in text


def test_a_result_ends_with_the_members_table_before_the_thread() -> None:
    text = panel_result("prun_x", "S.", "thr_syn", MEMBERS, hidden_thread_ids=[], notes=[PLANNER_FALLBACK_NOTE])
    assert PLANNER_FALLBACK_NOTE in text and text.index(PLANNER_FALLBACK_NOTE) < text.index("| Perspective |")
    assert text.index("| Perspective |") < text.index("Synthesis thread:")
    assert members_table(MEMBERS) in text


def test_the_members_table_says_who_answered_which_lens_and_how() -> None:
    assert members_table(MEMBERS).splitlines() == [
        "| Perspective | Lens | Agent | Status |",
        "| --- | --- | --- | --- |",
        "| 1 | v8 performance characteristics | claude-code (opus) | completed |",
        "| 2 | big-O complexity | codex (provider default) | partial |",
        "| 3 | pipes \\| and newlines | pi (pi/first) | timed_out |",
    ]


def test_a_failure_holds_the_partial_synthesis_and_every_raw_output() -> None:
    raw = [
        Evidence("ignored", LENSES[0], "completed", "Found it, see thr_prun_k2_worker_10."),
        Evidence("ignored", LENSES[1], "partial", "Half an answer"),
        Evidence("ignored", LENSES[2], "failed", ""),
    ]
    text = panel_failed(
        "prun_x",
        "the synthesis timed out (thread thr_prun_k2_planner)",
        "Partial: so far, per @thr_prun_k2_worker_1",
        raw,
        MEMBERS,
        hidden_thread_ids=HIDDEN,
        final_thread_id="thr_syn",
    )
    assert text.startswith(f"{FAILED_HEAD} (run prun_x): the synthesis timed out ({INTERNAL})\n")
    assert text.startswith("Perspectives panel failed")
    assert f"## Partial synthesis\n\nPartial: so far, per {INTERNAL}" in text
    assert f"### Perspective 1: v8 performance characteristics (completed)\n\nFound it, see {INTERNAL}." in text
    assert "### Perspective 2: big-O complexity (partial)\n\nHalf an answer" in text
    assert "### Perspective 3: duplicate work (failed)\n\n(no output)" in text
    assert "[cut:" not in text and "ignored" not in text
    for thread_id in HIDDEN:
        assert thread_id not in text
    assert text.count("thr_syn") == 1 and text.rstrip().endswith("Synthesis thread: `thr_syn`")


def test_a_failure_without_a_synthesis_thread_references_no_thread() -> None:
    text = panel_failed("prun_x", "no synthesis thread", None, [], hidden_thread_ids=HIDDEN)
    assert "## Partial synthesis\n\n(none)" in text and "## Raw perspective outputs\n\n(none)" in text
    assert "thread:" not in text.lower().replace("no synthesis thread", "") and "`" not in text


def test_a_failure_bounds_each_output_and_all_of_them_saying_what_was_cut() -> None:
    raw = [
        Evidence("", "short", "completed", "s" * 100),
        Evidence("", "long", "partial", "L" * 50_000),
        Evidence("", "medium", "completed", "m" * 3_000),
        Evidence("", "huge", "timed_out", ("h" * 99 + "\n") * 500),
        Evidence("", "big", "completed", "b" * 9_000),
    ]
    text = panel_failed("prun_x", "boom", "p" * 30_000, raw, hidden_thread_ids=[])
    shown = {
        lens: len(body.split("\n\n[cut:")[0])
        for lens, body in re.findall(r"### Perspective \d: (\w+) \(\w+\)\n\n(.*?)(?=\n\n### |\Z)", text, re.S)
    }
    assert shown["short"] == 100 and shown["medium"] == 3_000  # fit whole
    assert all(length <= RAW_EACH_CHARS for length in shown.values())
    assert sum(shown.values()) <= RAW_TOTAL_CHARS
    assert shown["long"] == shown["big"] == (RAW_TOTAL_CHARS - 3_100) // 3  # fair shares of what is left
    assert shown["huge"] % 100 == 99  # cut at a line end
    assert f"[cut: {50_000 - shown['long']:,} of 50,000 characters not shown]" in text
    assert f"[cut: {9_000 - shown['big']:,} of 9,000 characters not shown]" in text
    assert "[cut: 18,000 of 30,000 characters not shown]" in text  # the partial synthesis
    assert f"up to {RAW_EACH_CHARS:,} characters and all of them up to {RAW_TOTAL_CHARS:,}" in text


def test_a_few_short_outputs_are_bounded_by_each_only() -> None:
    raw = [Evidence("", "a", "completed", "a" * 7_000), Evidence("", "b", "completed", "b" * 100)]
    text = panel_failed("prun_x", "boom", None, raw, hidden_thread_ids=[])
    assert f"[cut: {7_000 - RAW_EACH_CHARS:,} of 7,000 characters not shown]" in text


def test_help_result_is_the_scrubbed_answer_and_its_expert_thread() -> None:
    text = help_result("Yes, see thr_prun_k2_planner and thr_exp.", "thr_exp", hidden_thread_ids=HIDDEN)
    assert text == f"Yes, see {INTERNAL} and {INTERNAL}.\n\nExpert thread: `thr_exp`\n"
    assert help_result("  ", None, hidden_thread_ids=[]) == "(the expert gave no answer)\n"


def test_the_scrub_still_finds_an_id_written_with_letters_case_folding_makes_ascii() -> None:
    """The scrub matches only ids a text can hold (`_present`); that test folds the letters case-insensitive
    matching folds to ASCII (Kelvin sign, long s, dotted and dotless i), so an id spelt with them is still found."""
    from bbridge.perspectives.delivery import scrub

    assert scrub("ref thr_\u0130d_\u212aey and thr_\u017fix here", ["thr_id_key", "thr_six"]) == (
        "ref [internal thread] and [internal thread] here"
    )

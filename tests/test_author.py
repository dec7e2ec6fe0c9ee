"""The bridge author's path (docs/writing-a-bridge.md): the example bridge is the page's, it passes `bbridge run
--strict` and `bbridge conformance`; the echo bridge's `--help`; and the classic mistakes, each named by its key."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bbridge.core import grammar as g
from bbridge.core.assembler import Assembler
from bbridge.core.events import stamp
from bbridge.core.guard import Guard
from bbridge.daemon import mistakes
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "minimal_bridge.py"
MISTAKEN = REPO / "tests" / "fakes" / "mistaken_bridge.py"


def bbridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bbridge", *args], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )


def test_the_docs_bridge_is_the_example_file() -> None:
    page = (REPO / "docs" / "writing-a-bridge.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert block is not None, "the page has no python block"
    assert block.group(1) == EXAMPLE.read_text(encoding="utf-8")


def test_the_example_bridge_runs_a_turn_under_strict() -> None:
    done = bbridge("run", "--strict", "--provider-cmd", f"{sys.executable} {EXAMPLE}", "--prompt", "hello there")
    assert done.returncode == 0, done.stderr
    assert "    HELLO THERE" in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == "■ turn completed"


def test_the_example_bridge_passes_conformance() -> None:
    done = bbridge("conformance", "--", sys.executable, str(EXAMPLE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith(" passed, 0 failed")
    assert "PASS turn/interrupt-settles-before-response" in done.stdout


def test_echo_help_prints_the_prompt_directives_instead_of_serving() -> None:
    # stdin stays open: a bridge would wait on it for the runtime; --help must not
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridges.echo", "--help"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.wait(timeout=30) == 0  # the text fits the pipe's buffer: it exits before it is read
        assert proc.stdout is not None
        out = proc.stdout.read()
    finally:
        proc.kill()
        proc.communicate()
    assert out.startswith("usage: python -m bridges.echo")
    assert "Prompt directives" in out
    for directive in ("`noop`", "`slow:<ms>`", "`hold`", "`fail`", "`deltas:all`", "`approve:", "`tool:<name>`"):
        assert directive in out


@pytest.mark.parametrize(
    ("mistake", "said"),
    [
        (
            "reuse-key",
            [
                "(item/opens-before-delta): item/agentMessage/delta for item ",
                'arrived before item/started. The bridge\'s item key: {"providerItemId":"msg"}. That key\'s item '
                "already completed in this thread, so this delta reaches the finished item: the key is reused.",
            ],
        ),
        ("close-unopened", ['item.textClose for item key {"providerItemId":"msg1"}, which is not open']),
        ("double-close", ['item.textClose for item key {"providerItemId":"msg-1"}, which already closed']),
    ],
)
def test_strict_run_names_each_mistake_by_the_bridges_own_key(mistake: str, said: list[str]) -> None:
    command = f"{sys.executable} {MISTAKEN} {mistake}"
    done = bbridge("run", "--strict", "--provider-cmd", command, "--prompt", "hi")
    assert done.returncode == 1, done.stdout + done.stderr
    strict = [line for line in done.stderr.splitlines() if line.startswith("bbridge run: --strict: ")]
    assert strict, done.stderr
    for text in said:
        assert any(text in line for line in strict), strict
    assert done.stderr.splitlines()[-1].startswith("bbridge run: failed: --strict: ")


def test_strict_run_passes_a_bridge_without_mistakes() -> None:
    done = bbridge("run", "--strict", "--provider-cmd", f"{sys.executable} {MISTAKEN} none", "--prompt", "hi")
    assert done.returncode == 0, done.stderr
    assert "--strict" not in done.stderr


@pytest.mark.parametrize("mistake", ["close-unopened", "double-close"])
def test_without_strict_a_suspect_close_changes_nothing_but_the_log(mistake: str) -> None:
    """The canonical stream is the reference's: the close still passes; the daemon's warning names the key."""
    command = f"{sys.executable} {MISTAKEN} {mistake}"
    done = bbridge("run", "--provider-cmd", command, "--prompt", "hi")
    assert done.returncode == 0, done.stderr
    assert "Suspect close from provider 'bridge'" in done.stderr
    assert '{\\"providerItemId\\":\\"msg' in done.stderr  # the JSON log line quotes the key


def _drops(deltas: list[g.Delta]) -> list[tuple[str, str]]:
    """(rule, hint) of each event the guard drops, the hint found as the daemon finds it."""
    assembler, guard = Assembler("p", "da00000000", text_delta_flush_ms=0), Guard()
    found = []
    for event in assembler.assemble("thr", [g.TurnOpen(), *deltas]):
        stamp(event, "thr", None)
        violation = guard.observe(event)
        if violation is not None:
            found.append((violation.rule, mistakes.drop_hint(assembler, guard, "thr", event, violation.rule)))
    return found


def test_a_drop_names_the_bridges_key_and_a_reused_one_says_so() -> None:
    msg = g.ItemKey(providerItemId="msg")
    reused = _drops([*_message(msg, "first"), g.ItemTextDelta(key=msg, channel="agentMessage", text="second")])
    assert [rule for rule, _ in reused] == ["item/opens-before-delta"]
    assert reused[0][1].startswith(' The bridge\'s item key: {"providerItemId":"msg"}. That key\'s item already')
    unopened = _drops([g.ItemOutputDelta(key=g.ItemKey(providerItemId="cmd-1"), channel="command", text="x")])
    assert unopened == [("item/opens-before-delta", ' The bridge\'s item key: {"providerItemId":"cmd-1"}.')]
    minted = _drops([g.ItemProgress(key=g.ItemKey(channel="tool"), message="working")])
    assert minted == [("item/opens-before-delta", "")]  # no key of the bridge's names the item: nothing to add


def _message(key: g.ItemKey, text: str) -> list[g.Delta]:
    return [
        g.ItemTextDelta(key=key, channel="agentMessage", text=text),
        g.ItemTextClose(key=key, channel="agentMessage"),
    ]


def test_suspect_closes_are_noted_without_changing_the_events() -> None:
    key = g.ItemKey(providerItemId="msg-1")
    closes = [
        g.ItemTextClose(key=key, channel="agentMessage"),
        g.ItemClose(key=g.ItemKey(providerItemId="x"), status="completed", item=g.PlanShape(text="p")),
    ]
    assembler = Assembler("p", "da00000000", text_delta_flush_ms=0)
    events = assembler.assemble("thr", [g.TurnOpen(), *_message(key, "hi"), *closes])
    assert [e["type"] for e in events] == [
        "turn/started",
        "item/started",
        "item/agentMessage/delta",
        "item/completed",
        "item/completed",
    ]
    assert [(s.thread_id, s.rule) for s in assembler.suspects] == [
        ("thr", "item/closes-once"),
        ("thr", "item/opens-before-close"),
    ]
    assert mistakes.suspect_message(assembler.suspects[1]).startswith(
        'item.close for item key {"providerItemId":"x"}, which is not open'
    )


def test_each_thread_keeps_its_last_mistakes() -> None:
    kept = mistakes.Mistakes()
    for n in range(mistakes.MAX_PER_THREAD + 5):
        kept.note("thr", "item/closes-once", f"m{n}")
    for n in range(mistakes.MAX_THREADS):
        kept.note(f"other-{n}", "item/closes-once", "m")
    assert kept.of_thread("thr") == []  # the least recently noted thread went first
    kept.note("thr", "item/closes-once", "again")
    assert kept.of_thread("thr") == [{"rule": "item/closes-once", "message": "again"}]
    assert len(kept.of_thread("other-1")) == 1 and kept.of_thread("other-0") == []

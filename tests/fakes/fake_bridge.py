"""A scriptable misbehaving bridge for the daemon's tests (stdlib only, blocking I/O).

Usage: python fake_bridge.py MODE[,MODE...]
Modes change one behaviour each; with none the bridge is well behaved:
  keyed           turns use providerTurnId "pt-<n>" (a keyed-turn provider)
  crash-mid-turn  exits with code 3 after opening a turn and a command item
  crash-at-open / crash-at-text / crash-at-usage / crash-at-done
                  exits with code 3 right after turn.open, after a streamed text delta, after the usage deltas
                  (`usage` mode), or after the boundary
  crash-at-start  exits with code 4 before answering initialize (stderr says why)
  garbage         writes non-JSON text on stdout before every answer
  oversize        writes a 65 MiB line on stdout before answering turn/start
  invalid-delta   sends two invalid thread/delta notifications (a v2 kind; U+001F in a key part) before the
                  turn's real deltas, and streams U+001F in the turn's text (valid there)
  never-answer    never answers turn/start
  exit-on-turn    exits with code 5 on turn/start, before answering it (stderr says why)
  no-start        answers turn/start but never opens the turn
  silent-turn     opens the turn and then goes quiet (no boundary)
  old-protocol    answers initialize with protocolVersion 1
  grammar-2       answers initialize with grammarVersions [2, 2]
  ask             sends interaction/request before finishing the turn and reports the answer as text
  approval        asks approval for its command (interaction/request); a deny ends the turn at once: the command
                  item closes failed (approvalStatus denied) and the turn is interrupted
  needs-env       like a bridge whose advice names its BB_* variables: without BB_FAKE_EXECUTABLE thread/start is
                  refused "… set BB_FAKE_EXECUTABLE …, then restart bb."; without BB_FAKE_TOKEN a turn fails with a
                  provider.error naming it
  strict-stop     refuses an interrupt when the thread has no live turn: -32001 "no active turn ..." (claude-code)
  extension       emits an extension item of kind "fake/card" with payload {"n": 1}
  bad-extension   emits an extension item of kind "fake/card" with payload {"n": "x"}
  floats          emits an extension item with payload {"n": 1.0, "half": 0.5} in a write of its own, then two
                  extension.state deltas with payloads {"n": 2.0} and {"n": 3.0} in one write (Python writes 1.0
                  where JavaScript writes 1)
  bad-requests    sends a schema-invalid interaction/request and item/tool/call first and reports the
                  error codes it got back as the turn's text
  deep            writes a line nested 100,000 levels deep on stdout before answering turn/start
  maintenance     answers provider/health, provider/usage and model/list with the params it got ({"echo": …})
  junk            writes seeded junk lines (random bytes, invalid UTF-8, deep nesting, invalid deltas, unknown
                  notifications, stray responses, malformed requests) before every message it sends
  pair            names this thread and "thr_other" in one write (one read chunk) when a turn starts
  tool            when the turn's first input text is a JSON object {"tool", "arguments"[, "bare"]}, sends
                  item/tool/call with that tool and arguments (without threadId when "bare" is true) and
                  reports the answer it got (result or error) as the turn's text; other turns are plain
  ignore-term     ignores SIGTERM (a bridge that only SIGKILL stops)
  skills          answers skills/configure {"ok": true} (without it: -32601, a bridge that declares no skills)
  restorable      declares sessionRestore and answers every construction with sessionRestorable true (its
                  thread/identity says it too); keeps its sessions: a release drops one, and a turn/start on a
                  thread with none is refused -32000 "unknown thread" (a released thread must be resumed first),
                  and a thread/resume of any providerThreadId but its own ("prov-<threadId>") is refused -32002
  unrestorable    as restorable, but each session says sessionRestorable false
  panel           answers a Perspectives thread's prompt (`panel_text`): a plan for an ai/complete prompt whose
                  schema enumerates lenses ("no plan" when FAKE_PLAN=garbage), a finding per worker lens (lens
                  "stall" streams a partial finding and holds its turn open), a synthesis quoting every finding
                  and the thread references it was given, an expert's answer; FAKE_HOLD=synthesis holds the
                  synthesis's turn open; and refuses a thread/stop without activeTurnId (-32602), as a bridge's
                  protocol type does (null is its value for a release)
  usage           reports its turns' token usage as codex does: two requests per turn, each a usage delta with the
                  request's `last` and the thread's running `total` (from zero in each bridge process), then the
                  second again unchanged (a repeat); FAKE_MODEL_FALLBACK=M also reports a fallback to model M
Requests seen are logged to stderr as `seen <method> <params-json>`.
"""

import json
import os
import random
import re
import signal
import sys

MODES = set(sys.argv[1].split(",")) if len(sys.argv) > 1 and sys.argv[1] else set()
if "ignore-term" in MODES:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
out = sys.stdout
turns = 0
live: dict[str, str] = {}  # threadId -> provider turn id
usage_totals: dict[str, list[int]] = {}  # threadId -> its running token total (`usage` mode)
sessions: set[str] = set()  # restorable/unrestorable: the threads with a session
SESSIONS = bool(MODES & {"restorable", "unrestorable"})
request_id = 0


JUNK_RANDOM = random.Random(7)


def junk_lines():
    rng = JUNK_RANDOM
    for _ in range(rng.randint(0, 3)):
        kind = rng.randrange(8)
        if kind == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randint(1, 60))).replace(b"\n", b" ")
        elif kind == 1:
            yield b'{"jsonrpc":"2.0","method":"thread/delta","params":{"threadId":"t\xff"}}'
        elif kind == 2:
            depth = rng.choice((300, 5000, 100_000))
            yield b'{"jsonrpc":"2.0","method":"thread/delta","params":' + b"[" * depth + b"]" * depth + b"}"
        elif kind == 3:
            params = {"threadId": "thr_junk", "deltas": [{"kind": rng.choice(("nope", "item.open", "turn.boundary"))}]}
            yield json.dumps({"jsonrpc": "2.0", "method": "thread/delta", "params": params}).encode()
        elif kind == 4:
            yield json.dumps({"jsonrpc": "2.0", "method": f"made/up/{rng.randrange(9)}", "params": [1]}).encode()
        elif kind == 5:
            yield json.dumps({"jsonrpc": "2.0", "id": rng.randrange(10**6, 10**7), "result": {}}).encode()
        elif kind == 6:
            yield json.dumps(
                {"jsonrpc": "2.0", "id": f"junk-{rng.randrange(10**6)}", "method": "item/tool/call", "params": {}}
            ).encode()
        else:
            yield b"[]"


def send(obj):
    if "junk" in MODES:
        for line in junk_lines():
            out.buffer.write(line + b"\n")
        out.flush()
    out.write(json.dumps(obj) + "\n")
    out.flush()


def delta(thread, *deltas):
    send({"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": thread, "deltas": list(deltas)}})


def request_usage(turn):
    """`usage` mode: the breakdowns [total, input, cached, output, reasoning] of a turn's two requests."""
    first_input, first_output = 1000 * turn + 7, 50 + turn
    return [
        [first_input + first_output, first_input, 100 * turn, first_output, 5],
        [320, 300, 250, 20, 0],
    ]


def usage_deltas(thread, tf):
    """`usage` mode: a turn's usage deltas, codex's shape (a running total, each request's last, a repeat)."""
    names = ("totalTokens", "inputTokens", "cachedInputTokens", "outputTokens", "reasoningOutputTokens")
    total = usage_totals.setdefault(thread, [0, 0, 0, 0, 0])
    deltas = []
    for last in request_usage(turns):
        total[:] = [a + b for a, b in zip(total, last, strict=True)]
        deltas.append({"kind": "usage", "total": dict(zip(names, total, strict=True)), "last": dict(zip(names, last, strict=True)),
                       "modelContextWindow": 200000, **tf})  # fmt: skip
    deltas.append(dict(deltas[-1]))
    if os.environ.get("FAKE_MODEL_FALLBACK"):
        fallback = {"originalModel": "fake-1", "fallbackModel": os.environ["FAKE_MODEL_FALLBACK"]}
        deltas.insert(0, {"kind": "provider.modelFallback", **fallback, "reason": "provider", "message": "fell back"})
    return deltas


def answer(msg, result):
    if "garbage" in MODES:
        out.write("this is not json\n")
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


def error(msg, code, message):
    send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": code, "message": message}})


def crash_at(point):
    if f"crash-at-{point}" in MODES:
        print(f"fake bridge: crashing at {point}", file=sys.stderr, flush=True)
        sys.exit(3)


def turn_field():
    return {"providerTurnId": f"pt-{turns}"} if "keyed" in MODES else {}


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def tool_spec(params):
    inputs = params.get("input") or []
    text = inputs[0].get("text") if inputs and isinstance(inputs[0], dict) else None
    try:
        spec = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return spec if isinstance(spec, dict) and "tool" in spec else None


def panel_text(params):
    """`panel` mode: the agent's text for a Perspectives prompt, and whether the turn then holds open."""
    inputs = params.get("input") or []
    prompt = inputs[0].get("text", "") if inputs and isinstance(inputs[0], dict) else ""
    if "JSON Schema:\n" in prompt:
        if os.environ.get("FAKE_PLAN") == "garbage":
            return "I would rather not plan.", False
        schema = json.loads(prompt.rsplit("JSON Schema:\n", 1)[1])
        lens = schema.get("properties", {}).get("prompts", {}).get("items", {}).get("properties", {}).get("lens", {})
        if "enum" in lens:
            return json.dumps(
                {"prompts": [{"lens": x, "prompt": f"Examine {x} closely."} for x in lens["enum"]]}
            ), False
        return "```json\n" + json.dumps({"answer": 42}) + "\n```", False
    worker = re.search(r"^Your lens: (.+)$", prompt, re.M)
    if worker:
        lens = worker.group(1)
        if lens == "stall":
            return "Partial finding on stall so far", True
        return f"Finding on {lens}: see [a.py:1](a.py#L1).", False
    if prompt.startswith("You synthesize"):
        found = re.findall(r"^(?:Finding on|Partial finding on).*$", prompt, re.M)
        refs = re.findall(r"@thr_hidden_\w+", prompt)
        hold = os.environ.get("FAKE_HOLD") == "synthesis"
        return "Synthesis of the panel:\n" + "\n".join(found) + "\nInternal: " + " ".join(refs), hold
    if "Answer concisely" in prompt:
        return "Expert answer: 42", False
    return "ok", False


def approve(thread):
    """Ask approval for the turn's command; the answer's result (an error answer reads as a deny)."""
    global request_id
    request_id += 1
    subject = {"kind": "command", "itemId": f"cmd-{turns}", "command": "ls", "cwd": "/", "actions": []}
    subject["sessionGrant"] = None
    payload = {"kind": "approval", "subject": subject, "reason": None, "availableDecisions": ["allow_once", "deny"]}
    params = {"providerThreadId": f"prov-{thread}", "threadId": thread, "turnId": None, "payload": payload}
    send({"jsonrpc": "2.0", "id": f"approve-{request_id}", "method": "interaction/request", "params": params})
    reply = read()
    while reply.get("method") is not None:  # requests that arrive meanwhile wait their turn
        handle(reply)
        reply = read()
    return reply.get("result") or {"decision": "deny"}


def handle(msg):
    global turns, request_id
    method = msg.get("method")
    if method is None:
        return
    params = msg.get("params") or {}
    print(f"seen {method} {json.dumps(params)}", file=sys.stderr, flush=True)
    thread = params.get("threadId")
    if method == "initialize":
        if "crash-at-start" in MODES:
            print("fake bridge: cannot start (crash-at-start)", file=sys.stderr, flush=True)
            sys.exit(4)
        caps = {"grammarVersions": [2, 2] if "grammar-2" in MODES else [3, 3], "fork": "tip"}
        if SESSIONS:
            caps["sessionRestore"] = True
        answer(msg, {"protocolVersion": 1 if "old-protocol" in MODES else 2, "capabilities": caps})
    elif method == "thread/start" and "needs-env" in MODES and not os.environ.get("BB_FAKE_EXECUTABLE"):
        error(msg, -32000, "fake could not find its CLI: set BB_FAKE_EXECUTABLE to its full path, then restart bb.")
    elif method == "thread/resume" and SESSIONS and params.get("providerThreadId") != f"prov-{thread}":
        error(msg, -32002, f"session {params.get('providerThreadId')} cannot be restored")
    elif method in ("thread/start", "thread/resume", "thread/fork"):
        ptid = f"prov-{thread}"
        identity = {"threadId": thread, "providerThreadId": ptid}
        if SESSIONS:
            identity["sessionRestorable"] = "restorable" in MODES
            sessions.add(thread)
        send({"jsonrpc": "2.0", "method": "thread/identity", "params": identity})
        delta(thread, {"kind": "session.reset"})
        answer(msg, {key: value for key, value in identity.items() if key != "threadId"})
        delta(thread, {"kind": "thread.started"}, {"kind": "thread.identity", "providerThreadId": ptid})
    elif method == "turn/start" and SESSIONS and thread not in sessions:
        error(msg, -32000, f"unknown thread {thread}: resume it first")
    elif method == "turn/start":
        if "never-answer" in MODES:
            return
        if "exit-on-turn" in MODES:
            print("fake bridge: exiting on turn/start", file=sys.stderr, flush=True)
            sys.exit(5)
        if "deep" in MODES:
            out.write('{"jsonrpc":"2.0","method":"thread/delta","params":' + "[" * 100_000 + "]" * 100_000 + "}\n")
            out.flush()
        if "pair" in MODES:
            out.write(
                "".join(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "method": "thread/delta",
                            "params": {"threadId": t, "deltas": [{"kind": "thread.name", "name": f"named {len(t)}"}]},
                        }
                    )
                    + "\n"
                    for t in (thread, "thr_other")
                )
            )
            out.flush()
        if "oversize" in MODES:
            out.write("x" * (65 * 1024 * 1024) + "\n")
            out.flush()
        turns += 1
        answer(msg, {})
        if "no-start" in MODES:
            return
        if "invalid-delta" in MODES:
            delta(thread, {"kind": "turn.open"}, {"kind": "message.delta", "text": "v2"})
            delta(thread, {"kind": "turn.open", "providerTurnId": "pt\x1f1"})  # written as `\u001f`
        tf = turn_field()
        live[thread] = tf.get("providerTurnId", "current")
        accepted = {"kind": "input.accepted", "clientRequestId": params["clientRequestId"], **tf}
        delta(thread, {"kind": "turn.open", **tf}, accepted)
        crash_at("open")
        if "needs-env" in MODES and not os.environ.get("BB_FAKE_TOKEN"):
            failure = {"kind": "provider.error", "message": "fake CLI: not logged in", **tf}
            delta(thread, {**failure, "detail": "set BB_FAKE_TOKEN to a token, then restart bb.", "willRetry": False})
            delta(thread, {"kind": "turn.boundary", "status": "failed", **tf})
            live.pop(thread, None)
            return
        if "silent-turn" in MODES:
            return
        delta(
            thread,
            {
                "kind": "item.open",
                "key": {"providerItemId": f"cmd-{turns}"},
                "item": {"type": "command", "command": "ls", "cwd": "/"},
                **tf,
            },
        )
        if "approval" in MODES and approve(thread).get("decision") == "deny":
            command = {"type": "command", "command": "ls", "cwd": "/"}
            close = {"kind": "item.close", "key": {"providerItemId": f"cmd-{turns}"}, "status": "failed", **tf}
            delta(thread, {**close, "approvalStatus": "denied", "item": command})
            delta(thread, {"kind": "turn.boundary", "status": "interrupted", **tf})
            live.pop(thread, None)
            return
        if "crash-mid-turn" in MODES:
            print("fake bridge: crashing mid-turn", file=sys.stderr, flush=True)
            sys.exit(3)
        text = "hel\x1flo" if "invalid-delta" in MODES else "hello"
        if "panel" in MODES:
            text, hold = panel_text(params)
            if hold:
                delta(
                    thread,
                    {"kind": "item.textDelta", "key": {"channel": "a"}, "channel": "agentMessage", "text": text, **tf},
                )
                return
        if "bad-requests" in MODES:
            codes = []
            for bad_method, bad_params in (
                (
                    "interaction/request",
                    {"providerThreadId": f"prov-{thread}", "turnId": None, "payload": {"kind": "?"}},
                ),
                ("item/tool/call", {"providerThreadId": f"prov-{thread}", "turnId": None, "callId": "c1"}),
            ):
                request_id += 1
                send({"jsonrpc": "2.0", "id": f"bad-{request_id}", "method": bad_method, "params": bad_params})
                reply = read()
                while reply.get("method") is not None:
                    handle(reply)
                    reply = read()
                codes.append([reply.get("error", {}).get("code"), reply.get("error", {}).get("message")])
            text = json.dumps(codes)
        spec = tool_spec(params) if "tool" in MODES else None
        if spec is not None:
            request_id += 1
            call = {
                "providerThreadId": f"prov-{thread}",
                "threadId": thread,
                "turnId": None,
                "callId": f"call-{request_id}",
                "tool": spec["tool"],
                "arguments": spec.get("arguments"),
            }
            if spec.get("bare"):
                del call["threadId"]
            send({"jsonrpc": "2.0", "id": f"tool-{request_id}", "method": "item/tool/call", "params": call})
            reply = read()
            while reply.get("method") is not None:  # requests that arrive meanwhile wait their turn
                handle(reply)
                reply = read()
            text = json.dumps(reply.get("result", reply.get("error")))
        if "ask" in MODES:
            request_id += 1
            send(
                {
                    "jsonrpc": "2.0",
                    "id": f"ask-{request_id}",
                    "method": "interaction/request",
                    "params": {
                        "providerThreadId": f"prov-{thread}",
                        "threadId": thread,
                        "turnId": None,
                        "payload": {
                            "kind": "user_question",
                            "questions": [{"id": "q1", "prompt": "Go?", "multiSelect": False, "allowFreeText": True}],
                        },
                    },
                }
            )
            reply = read()
            while reply.get("method") is not None:  # requests that arrive meanwhile wait their turn
                handle(reply)
                reply = read()
            text = json.dumps(reply.get("result", reply.get("error")))
        if "extension" in MODES or "bad-extension" in MODES:
            payload = {"n": "x"} if "bad-extension" in MODES else {"n": 1}
            delta(
                thread,
                {
                    "kind": "item.open",
                    "key": {"providerItemId": f"ext-{turns}"},
                    "item": {"type": "extension", "kind": "fake/card", "payload": payload},
                    "presentation": {"label": {"pending": "Card", "completed": "Card"}, "icon": {"glyph": "Card"}},
                    **tf,
                },
            )
        if "floats" in MODES:
            delta(
                thread,
                {
                    "kind": "item.open",
                    "key": {"providerItemId": f"ext-{turns}"},
                    "item": {"type": "extension", "kind": "fake/card", "payload": {"n": 1.0, "half": 0.5}},
                    "presentation": {"label": {"pending": "Card", "completed": "Card"}, "icon": {"glyph": "Card"}},
                    **tf,
                },
            )
            states = [
                {"kind": "extension.state", "extensionKind": "fake/card", "payload": {"n": n}} for n in (2.0, 3.0)
            ]
            note = {"jsonrpc": "2.0", "method": "thread/delta"}
            out.write(
                "".join(json.dumps({**note, "params": {"threadId": thread, "deltas": [d]}}) + "\n" for d in states)
            )
            out.flush()
        delta(
            thread,
            {
                "kind": "item.close",
                "key": {"providerItemId": f"cmd-{turns}"},
                "status": "completed",
                "item": {"type": "command", "command": "ls", "cwd": "/"},
                **tf,
            },
            {"kind": "item.textDelta", "key": {"channel": "a"}, "channel": "agentMessage", "text": text, **tf},
        )
        crash_at("text")
        if "usage" in MODES:
            for usage in usage_deltas(thread, tf):
                delta(thread, usage)
            crash_at("usage")
        delta(thread, {"kind": "item.textClose", "key": {"channel": "a"}, "channel": "agentMessage", **tf})
        delta(thread, {"kind": "turn.boundary", "status": "completed", **tf})
        crash_at("done")
        live.pop(thread, None)
    elif method == "turn/steer":
        if thread not in live:
            error(msg, -32001, "no active turn")
        else:
            answer(msg, {"steeredTurnId": params.get("expectedTurnId")})
    elif method == "thread/stop" and "panel" in MODES and "activeTurnId" not in params:
        error(msg, -32602, 'Invalid params for "thread/stop": Object missing required field `activeTurnId`')
    elif method == "thread/stop":
        if params.get("intent") == "release":
            sessions.discard(thread)
        if params.get("intent") == "interrupt" and "strict-stop" in MODES and thread not in live:
            error(msg, -32001, f"no active turn for thread {thread}")
        elif params.get("intent") == "interrupt":
            delta(thread, {"kind": "session.ended"})
            live.pop(thread, None)
        answer(msg, {"stoppedTurnId": params.get("activeTurnId")})
    elif method == "skills/configure" and "skills" in MODES:
        answer(msg, {"ok": True})
    elif "maintenance" in MODES and method in ("provider/health", "provider/usage", "model/list"):
        answer(msg, {"echo": params})
    elif method == "model/list":
        answer(msg, {"models": [{"id": "fake-1"}], "selectedOnlyModels": []})
    else:
        error(msg, -32601, f"Method not found: {method}")


while True:
    handle(read())

"""A stdlib bridge that passes every conformance rule unless a mode breaks one (tests/test_conformance.py).

Usage: python conformance_bridge.py [MODE[,MODE...]]
Prompts: "noop" is a zero-work turn, a "hold" word keeps the turn open until a stop, anything else is answered.
Provider turn ids ("pt-<n>") and item ids ("msg-<n>") restart with every session, as many providers' do; the
session.reset of every session opening is what keeps bb ids unique.

Modes, each breaking the rule named after it:
  drop-unknown          unknown methods are never answered            rpc/unknown-method
  invalid-as-error      bad params are answered -32000                rpc/invalid-params
  die-on-junk           a non-JSON line makes the bridge exit          rpc/non-json-ignored
  answer-responses      response-shaped lines are answered -32600      rpc/response-not-request
  old-protocol          initialize answers protocolVersion 1           handshake/initialize
  response-first        thread/start answers before identity/reset     session/start-identity
  silent-turn           turns open and never settle                    turn/lifecycle (and more)
  invalid-delta         a turn sends an invalid thread/delta           events/schema-valid
  delta-before-open     output for a command item that never opened    item/opens-before-delta
  release-interrupts    a release stop fabricates an interrupted turn  stop/release-not-interrupted
  no-reset-on-resume    resume opens the session without session.reset session/resume-id-uniqueness
  zero-work-hangs       the "noop" turn never settles                  turn/settles-without-activity
  double-open           every turn.open is sent twice                  turn/starts-once
  double-boundary       every turn.boundary is sent twice              turn/settles-once
  ghost-boundary        a turn.boundary for a turn never opened        turn/known
  dual-settle           a tool item that closes as a file change       item/settles-once
  settle-after-stop     an interrupt is answered before it settles     turn/interrupt-settles-before-response
  skills-error          skills/configure answers -32000                skills/configure-matches-declaration
  foreign-icon          an item with the icon glyph "other/star"       presentation/icon-namespaced-declared
  mute                  turns are answered but send no deltas          recorded/<cell>/not-empty
  close-unopened        the message is closed under a key never opened item/opens-before-close
  double-close          the message is closed twice                    item/closes-once
  reuse-key             a turn's two messages share the key "msg"      item/opens-before-delta (hinting the reuse)
"""

import json
import sys

MODES = set(sys.argv[1].split(",")) if len(sys.argv) > 1 and sys.argv[1] else set()
REQUIRED = {
    "initialize": ("protocolVersion", "client"),
    "thread/start": ("threadId", "cwd", "options"),
    "thread/resume": ("threadId", "cwd", "options", "providerThreadId"),
    "thread/fork": ("threadId", "cwd", "options", "sourceProviderThreadId"),
    "turn/start": ("threadId", "providerThreadId", "input", "clientRequestId", "options"),
    "thread/stop": ("threadId", "providerThreadId", "intent", "activeTurnId"),
}
sessions: dict[str, dict] = {}  # threadId -> {"ptid", "turns", "live"}


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def answer(msg, result):
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


def error(msg, code, message, data=None):
    body = {"code": code, "message": message, **({"data": data} if data is not None else {})}
    send({"jsonrpc": "2.0", "id": msg["id"], "error": body})


def delta(thread, *deltas):
    send({"jsonrpc": "2.0", "method": "thread/delta", "params": {"threadId": thread, "deltas": list(deltas)}})


def open_session(thread, ptid, msg):
    sessions[thread] = {"ptid": ptid, "turns": 0, "live": None}
    if "response-first" in MODES:
        answer(msg, {"providerThreadId": ptid})
    send({"jsonrpc": "2.0", "method": "thread/identity", "params": {"threadId": thread, "providerThreadId": ptid}})
    if not (msg["method"] == "thread/resume" and "no-reset-on-resume" in MODES):
        delta(thread, {"kind": "session.reset"})
    if "response-first" not in MODES:
        answer(msg, {"providerThreadId": ptid})


def turn_start(msg, params):
    thread = params["threadId"]
    session = sessions.get(thread)
    if session is None:
        return error(msg, -32000, f"Unknown thread: {thread}")
    answer(msg, {})
    if "mute" in MODES:
        return
    session["turns"] += 1
    n = session["turns"]
    turn = {"providerTurnId": f"pt-{n}"}
    prompt = " ".join(i.get("text", "") for i in params["input"] if i.get("type") == "text")
    opening = {"kind": "turn.open", **turn}
    delta(thread, {"kind": "input.accepted", "clientRequestId": params["clientRequestId"], **turn}, opening)
    if "double-open" in MODES:
        delta(thread, opening)
    if "silent-turn" in MODES or (prompt == "noop" and "zero-work-hangs" in MODES):
        session["live"] = (turn, None)
        return
    if "invalid-delta" in MODES:
        delta(thread, {"kind": "message.delta", "text": "grammar v1"})
    if "delta-before-open" in MODES:
        output = {"kind": "item.outputDelta", "key": {"providerItemId": f"cmd-{n}"}, "channel": "command", "text": "x"}
        delta(thread, {**output, **turn})
    if "dual-settle" in MODES:
        key = {"providerItemId": f"tool-{n}"}
        delta(thread, {"kind": "item.open", "key": key, "item": {"type": "tool", "tool": "Edit", "args": {}}, **turn})
        change = {"type": "fileChange", "changes": [{"path": "/tmp/a", "kind": "add", "newText": "a\n"}]}
        delta(thread, {"kind": "item.close", "key": key, "status": "completed", "item": change, **turn})
    if "foreign-icon" in MODES:
        key = {"providerItemId": f"icon-{n}"}
        item = {"type": "tool", "tool": "Star", "args": {}}
        presentation = {"label": {"pending": "Starring", "completed": "Starred"}, "icon": {"glyph": "other/star"}}
        delta(thread, {"kind": "item.open", "key": key, "item": item, "presentation": presentation, **turn})
        delta(thread, {"kind": "item.close", "key": key, "status": "completed", "item": item, **turn})
    if prompt != "noop":
        key = {"providerItemId": "msg" if "reuse-key" in MODES else f"msg-{n}"}
        if "reuse-key" in MODES:  # a first message under the same key, finished before the answer streams
            first = {"kind": "item.textDelta", "key": key, "channel": "agentMessage", "text": "thinking…", **turn}
            delta(thread, first, {"kind": "item.textClose", "key": key, "channel": "agentMessage", **turn})
        text = {"kind": "item.textDelta", "key": key, "channel": "agentMessage", "text": f"echo: {prompt}", **turn}
        delta(thread, text)
        if "hold" in prompt.split():
            session["live"] = (turn, key)
            return
        closed = {"providerItemId": f"msg{n}"} if "close-unopened" in MODES else key
        close = {"kind": "item.textClose", "key": closed, "channel": "agentMessage", **turn}
        delta(thread, close, *([close] if "double-close" in MODES else []))
    boundary = {"kind": "turn.boundary", "status": "completed", **turn}
    delta(thread, boundary)
    if "double-boundary" in MODES:
        delta(thread, boundary)
    if "ghost-boundary" in MODES:
        delta(thread, {"kind": "turn.boundary", "status": "completed", "providerTurnId": "ghost"})


def thread_stop(msg, params):
    thread = params["threadId"]
    session = sessions.get(thread)
    if params["intent"] == "release":
        sessions.pop(thread, None)
        if "release-interrupts" in MODES:
            ghost = {"providerTurnId": "released"}
            delta(thread, {"kind": "turn.open", **ghost}, {"kind": "turn.boundary", "status": "interrupted", **ghost})
        return answer(msg, {})
    live = session and session["live"]
    if live and "settle-after-stop" in MODES:
        answer(msg, {})
    if live:  # keyed turns are settled by their boundary: session.ended settles only unkeyed ones
        turn, key = live
        closes = [] if key is None else [{"kind": "item.textClose", "key": key, "channel": "agentMessage", **turn}]
        delta(thread, *closes, {"kind": "turn.boundary", "status": "interrupted", **turn})
        session["live"] = None
    if not (live and "settle-after-stop" in MODES):
        answer(msg, {})


def handle(msg):
    method = msg.get("method")
    if "id" not in msg or not method:
        if "id" in msg and method is None and "answer-responses" in MODES:
            error(msg, -32600, "Invalid Request")
        return  # responses and notifications are never answered
    params = msg.get("params") or {}
    missing = [key for key in REQUIRED.get(method, ()) if key not in params]
    if missing:
        if "invalid-as-error" in MODES:
            return error(msg, -32000, f"bad params for {method}")
        issues = [{"path": [key], "message": "Required"} for key in missing]
        if "issues-in-message" in MODES:  # the Claude Code / Codex shape: no data
            text = "; ".join(f"params.{i['path'][0]}: {i['message']}" for i in issues)
            return error(msg, -32602, f"Invalid params for {method}: {text}")
        if "bare-invalid" in MODES:
            return error(msg, -32602, f"Invalid params for {method}")
        return error(msg, -32602, f"Invalid params for {method}", issues)
    if method == "initialize":
        version = 1 if "old-protocol" in MODES else 2
        answer(msg, {"protocolVersion": version, "capabilities": {"grammarVersions": [3, 3], "sessionRestore": True}})
    elif method == "thread/start":
        open_session(params["threadId"], f"fake-{params['threadId']}", msg)
    elif method == "thread/resume":
        open_session(params["threadId"], params["providerThreadId"], msg)
    elif method == "thread/fork":
        open_session(params["threadId"], f"fork-{params['threadId']}", msg)
    elif method == "turn/start":
        turn_start(msg, params)
    elif method == "thread/stop":
        thread_stop(msg, params)
    elif method == "skills/configure" and "skills-error" in MODES:
        error(msg, -32000, "skills are broken")
    elif "drop-unknown" not in MODES:
        error(msg, -32601, f"Method not found: {method}")


for line in sys.stdin:
    try:
        message = json.loads(line)
    except json.JSONDecodeError:
        if "die-on-junk" in MODES:
            sys.exit(1)
        continue
    if isinstance(message, dict):
        handle(message)

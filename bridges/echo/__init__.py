"""The echo bridge (`python -m bridges.echo`): a provider that echoes prompts, written with `bbridge.kit`.

It is the canary for the daemon and for bridge tooling (protocol.md §8): the
plain behaviour matches the example echo (§8.1) — identity then
`session.reset` on every session, one assistant message `echo: <prompt>` per
turn — streamed in several `item.textDelta` chunks, with usage summed per
session and a `providerCheckpointId` on every completed turn.

Capabilities: grammar [3, 3], `steerMode: "inject"`, `sessionRestore: true`,
`fork: "checkpoint"` (forks may start from any checkpoint this process has
handed out; resume refuses -32002 for a `providerThreadId` it could never
have minted, i.e. one not starting with `echo_`). Methods: `initialize`,
`model/list`, `thread/start` (runs a turn for `input` when given),
`thread/resume`, `thread/fork`, `turn/start`, `turn/steer`, `thread/stop`,
`thread/discard`; anything else is -32601.

Prompt directives (whitespace-separated tokens of the joined text inputs):

* *(none)* — stream `echo: <prompt>`, then usage and `turn.boundary completed`.
* `noop`, or a prompt with no text — a zero-work turn: `turn.open` then
  `turn.boundary completed`, nothing in between (§4.6).
* `slow:<ms>` — wait `<ms>` milliseconds between streamed batches (the first
  goes out at once), so a steer or an interrupt can land mid-turn.
* `hold` — after streaming, keep the turn open: steers are accepted and
  streamed into it; a steer whose text contains `finish` completes it;
  `thread/stop {intent: "interrupt"}` settles it.
* `fail` or `fail:<detail>` — stream the answer, then a settling
  `provider.error` (`Provider error`, detail with `_` read as spaces): the
  turn ends `failed`.
* `deltas:all` — one turn that emits every one of the 26 delta kinds and all
  16 item shapes, so the assembled timeline holds all 30 canonical event
  types. The two session kinds come after the turn's boundary: a
  `session.ended` with nothing open (it settles nothing) and an internal
  session rebuild (§4.3: `session/replaced`, identity, `session.reset`).
  Extension kinds used: `echo/note` (item) and `echo/state` (state).
* `deltas:session.ended` — stream the answer, then end the turn with
  `session.ended` (streamed text kept, turn `interrupted`).
* `approve:<command|file_change|permission_grant|plan>` — before answering,
  ask for an approval (`interaction/request`, a fixed payload of that
  subject kind, subject `itemId` `approval-<turn number>`,
  `providerNativeIds: true`); allowed (`allow_once`/`allow_for_session`)
  streams the normal answer, anything else `echo: denied`. Nothing is run.
* `tool:<name>`, optionally with `args:<JSON object without spaces>` — call
  the client's tool `<name>` (declared or not: the daemon decides) with an
  `item/tool/call` request inside a `tool` item shown with the tool's
  declared presentation, then echo what came back (`echo: <name> → <text>`).
  The bridge-author's view of the round trip (protocol.md §3.6.1).

`turn/steer` answers -32001 when the thread has no live turn; otherwise the
steer is accepted (`input.accepted`) into the live turn and its text streamed
as part of the answer. `thread/stop` with `interrupt` settles a live turn with
`session.ended` *before* answering; `release` forgets the session and
fabricates nothing.
"""

# The package has the agent bridges' outline where it fits (ARCHITECTURE.md): `bridge` routes the runtime's
# methods (the kit's typed handlers) to one `session.Session` per thread (turns, steers, settlement); `translate`
# is pure (a prompt's directives -> the turn's delta batches, `deltas:all` among them); `approvals` asks
# `approve:<kind>`, `dynamic_tools` calls `tool:<name>`, `presentation` holds the rows' labels and icons. There is
# no provider process, so no `child`, and no maintenance methods. `__main__` is the entry point; this docstring is
# its `--help`.

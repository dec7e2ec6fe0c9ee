/**
 * The client end to end against a live daemon's built-in echo bridge:
 *
 *     node dist/examples/echo.js --socket /run/bbridge.sock [--token-file F]
 *
 * It starts a thread, streams one turn that asks for an approval first (the echo bridge's `approve:command`),
 * allows it from the relayed request, drops the connection mid-turn, and lets the event iterator reconnect and
 * resume with `afterSeq`. It checks every `seq` arrived once and in order and prints one JSON summary line;
 * the exit status says whether it worked.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { Client, LEAVE, type RelayedRequest, type ThreadEntry } from "../src/client.js";

const { values } = parseArgs({ options: { socket: { type: "string" }, "token-file": { type: "string" } } });
if (values.socket === undefined) {
  console.error("usage: echo.js --socket PATH [--token-file F]");
  process.exit(2);
}
const tokenFile = values["token-file"];
const token = tokenFile === undefined ? undefined : readFileSync(tokenFile, "utf8").trim();

const threadId = `thr_ts_${process.pid}`;
const prompt = "approve:command slow:150 the sea is wide and the sea is deep and the ships go out and home";
const options = { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null } as const;
const approvals: string[] = [];

async function onRequest(request: RelayedRequest): Promise<unknown> {
  if (request.method !== "interaction/request" || request.params.payload.kind !== "approval") return LEAVE;
  approvals.push(request.params.payload.subject.kind);
  return { decision: "allow_once", grantedPermissions: null };
}

const client = await Client.connect(values.socket, { token, onRequest, clientName: "bbridge-ts-example" });
try {
  const started = await client.request("thread/start", { providerId: "echo", threadId, cwd: process.cwd(), options });
  await client.request("turn/start", {
    providerId: "echo",
    threadId,
    providerThreadId: started.providerThreadId,
    clientRequestId: "creq_ts23456789",
    input: [{ type: "text", text: prompt, mentions: [] }],
    options: { ...options, envVars: {} },
  });

  const seen: ThreadEntry[] = [];
  let dropped = false;
  let text = "";
  for await (const entry of client.events(threadId)) {
    seen.push(entry);
    if (entry.event.type === "item/agentMessage/delta") {
      text += String(entry.event.delta);
      if (!dropped) {
        dropped = true;
        client.dropConnection(); // mid-turn: the iterator reconnects and asks for afterSeq = this entry's seq
      }
    }
    if (entry.event.type === "turn/completed") break;
  }

  const seqs = seen.map((entry) => entry.seq);
  const inOrder = seqs.every((seq, i) => seq === i + 1);
  const completed = seen.at(-1)?.event.status;
  const ok = inOrder && dropped && completed === "completed" && text === `echo: ${prompt}` && approvals.length === 1;
  console.log(JSON.stringify({ ok, events: seqs.length, inOrder, dropped, completed, approvals, text }));
  process.exitCode = ok ? 0 : 1;
} finally {
  client.close();
}

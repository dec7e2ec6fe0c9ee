/**
 * The client over WebSocket (`bbridge serve --listen 127.0.0.1:8765 --token-file F`), against the echo bridge;
 * node ≥ 22 (its global `WebSocket`):
 *
 *     node dist/examples/ws.js --url ws://127.0.0.1:8765 [--token-file F]
 *
 * It starts a thread and a turn whose approval (the echo bridge's `approve:command`) it leaves pending, drops the
 * connection while the approval waits, and lets the event iterator reconnect and resume with `afterSeq`; the
 * approval is still pending on the new connection, which answers it, and the turn completes. It checks every
 * `seq` arrived once and in order and prints one JSON summary line; the exit status says whether it worked.
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";

import { Client, Disconnected, type ThreadEntry } from "../src/client.js";

const { values } = parseArgs({ options: { url: { type: "string" }, "token-file": { type: "string" } } });
if (values.url === undefined) {
  console.error("usage: ws.js --url ws://HOST:PORT [--token-file F]");
  process.exit(2);
}
const tokenFile = values["token-file"];
const token = tokenFile === undefined ? undefined : readFileSync(tokenFile, "utf8").trim();

const threadId = `thr_ws_${process.pid}`;
const prompt = "approve:command the link drops and the approval waits";
const options = { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null } as const;

// no onRequest: the relayed approval is left pending, for any connection's `interaction/respond`
const client = await Client.connect(values.url, { token, clientName: "bbridge-ts-ws-example" });

/** The thread's pending approval, once it is asked; a call the dropped connection fails is asked again (bounded). */
async function pendingApproval(): Promise<string> {
  for (let attempt = 0; attempt < 200; attempt++) {
    try {
      const [waiting] = (await client.pending(threadId)).pending;
      if (waiting !== undefined) return waiting.requestId;
    } catch (error) {
      if (!(error instanceof Disconnected)) throw error; // the iterator is reconnecting
    }
    await sleep(50);
  }
  throw new Error("no approval became pending");
}

/** Drop the link while the approval waits; answer it from the new connection. */
async function dropThenAnswer(): Promise<{ asked: string; stillPending: boolean }> {
  const asked = await pendingApproval();
  client.dropConnection(); // `events` reconnects and asks `thread/events {afterSeq}`
  const again = await pendingApproval();
  await client.respond(again, { result: { decision: "allow_once", grantedPermissions: null } });
  return { asked, stillPending: again === asked };
}

try {
  const started = await client.request("thread/start", { providerId: "echo", threadId, cwd: process.cwd(), options });
  await client.request("turn/start", {
    providerId: "echo",
    threadId,
    providerThreadId: started.providerThreadId,
    input: [{ type: "text", text: prompt, mentions: [] }],
    options: { ...options, envVars: {} },
  });
  const answered = dropThenAnswer();
  const seen: ThreadEntry[] = [];
  let text = "";
  for await (const entry of client.events(threadId)) {
    seen.push(entry);
    if (entry.event.type === "item/agentMessage/delta") text += String(entry.event.delta);
    if (entry.event.type === "turn/completed") break;
  }
  const { asked, stillPending } = await answered;
  const seqs = seen.map((entry) => entry.seq);
  const inOrder = seqs.every((seq, i) => seq === i + 1);
  const completed = seen.at(-1)?.event.status;
  const ok = inOrder && stillPending && completed === "completed" && text === `echo: ${prompt}`;
  console.log(JSON.stringify({ ok, events: seqs.length, inOrder, asked, stillPending, completed, text }));
  process.exitCode = ok ? 0 : 1;
} finally {
  client.close();
}

import { readFileSync } from "node:fs";

import { Client, LEAVE, type RelayedRequest } from "../src/client.js";

const [socket, tokenFile] = process.argv.slice(2) as [string, string];
const options = { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null } as const;

async function onRequest(request: RelayedRequest): Promise<unknown> {
  if (request.method === "interaction/request" && request.params.payload.kind === "approval") {
    return { decision: "allow_once", grantedPermissions: null };
  }
  return LEAVE; // not ours: it stays pending for another client
}

const client = await Client.connect(socket, { token: readFileSync(tokenFile, "utf8").trim(), onRequest });
const start = { providerId: "echo", threadId: "thr_ts", cwd: "/tmp", options };
const { providerThreadId } = await client.request("thread/start", start);
const input = [{ type: "text" as const, text: "approve:command hello", mentions: [] }];
const turn = { providerId: "echo", threadId: "thr_ts", providerThreadId, input }; // the client mints its clientRequestId
await client.request("turn/start", { ...turn, options: { ...options, envVars: {} } });
for await (const { event } of client.events("thr_ts")) { // reconnects and resumes after the last seq by itself
  if (event.type === "item/agentMessage/delta") process.stdout.write(String(event.delta));
  if (event.type === "turn/completed") {
    console.log(` [${String(event.status)}]`);
    break;
  }
}
client.close();

/**
 * The client on stdio: it spawns the daemon itself and runs one echo turn, leaving the `clientRequestId` to the
 * client (it mints one).
 *
 *     node dist/examples/spawn.js python -m bbridge serve
 *
 * Prints the daemon's providers, the turn's answer and the minted id its `turn/input/accepted` carried back as
 * one JSON line; the exit status says whether it worked.
 */
import { Client, isClientRequestId } from "../src/client.js";

const argv = process.argv.slice(2);
const client = await Client.spawn(argv);
try {
  const status = await client.status();
  const options = { permissionMode: "full", permissionScope: "full", approvalReviewer: null, permissionEscalation: null } as const;
  const start = { providerId: "echo", threadId: "thr_spawned", cwd: process.cwd(), options };
  const { providerThreadId } = await client.request("thread/start", start);
  await client.request("turn/start", {
    providerId: "echo",
    threadId: "thr_spawned",
    providerThreadId,
    input: [{ type: "text", text: "hello over stdio", mentions: [] }],
    options: { ...options, envVars: {} },
  });
  let text = "";
  let accepted = "";
  for await (const { event } of client.events("thr_spawned")) {
    if (event.type === "turn/input/accepted") accepted = String(event.clientRequestId);
    if (event.type === "item/agentMessage/delta") text += String(event.delta);
    if (event.type === "turn/completed") break;
  }
  const providers = status.providers.map((provider) => provider.providerId);
  const ok = text === "echo: hello over stdio" && providers.includes("echo") && isClientRequestId(accepted);
  console.log(JSON.stringify({ ok, providers, text, accepted }));
  process.exitCode = ok ? 0 : 1;
} finally {
  client.close();
}

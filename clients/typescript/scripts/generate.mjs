// TypeScript declarations of the daemon's client API, generated from its OpenRPC document (`bbridge schema`
// writes it; `clients/openrpc.json` is the committed copy). Usage: node scripts/generate.mjs OPENRPC OUT.ts
//
// Every component schema becomes a named type (json-schema-to-typescript), and three maps tie the API together:
// `Methods` (client -> daemon: method -> {params, result}), `Notifications` (daemon -> client: method -> params)
// and `ClientRequests` (daemon -> client requests: method -> {params, result}). The client module types its calls
// by these maps, so a schema change that breaks the client breaks `tsc`.
//
// A named string with a pattern (`ClientRequestId`) keeps the pattern as a `@pattern` tag in its doc comment
// (TypeScript has no regex types), and one whose pattern starts with a literal prefix is typed by it as a template
// literal (`` `creq_${string}` ``): a string from elsewhere must pass the client's `isClientRequestId` guard (or
// come from `clientRequestId()`) before it types as one, and a literal of another form fails `tsc`.
import { readFileSync, writeFileSync } from "node:fs";
import { compile } from "json-schema-to-typescript";

const [source, target] = process.argv.slice(2);
if (!source || !target) {
  console.error("usage: node scripts/generate.mjs OPENRPC_JSON OUT_TS");
  process.exit(2);
}
const doc = JSON.parse(readFileSync(source, "utf8"));
for (const schema of Object.values(doc.components.schemas)) {
  if (schema.type !== "string" || typeof schema.pattern !== "string") continue;
  schema.description = `${schema.description ?? ""}\n\n@pattern ${schema.pattern}`.trim();
  const prefix = /^\^([A-Za-z0-9_-]+)(?=[[(.\\])/.exec(schema.pattern)?.[1];
  if (prefix !== undefined) schema.tsType = `\`${prefix}\${string}\``;
}
const local = (node) => JSON.parse(JSON.stringify(node).replaceAll('"#/components/schemas/', '"#/definitions/'));
const entry = (properties) => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
});

function paramsOf(method) {
  const properties = {};
  const required = [];
  for (const param of method.params) {
    properties[param.name] = param.schema;
    if (param.required) required.push(param.name);
  }
  return { type: "object", properties, required, additionalProperties: false };
}

const methods = Object.fromEntries(
  doc.methods.map((m) => [m.name, entry({ params: paramsOf(m), result: m.result.schema })]),
);
const notifications = Object.fromEntries(doc["x-notifications"].map((n) => [n.name, n.params]));
const requests = Object.fromEntries(
  doc["x-client-requests"].map((r) => [r.name, entry({ params: r.params, result: r.result })]),
);
const root = local({
  title: "BbridgeApi",
  description: `${doc.info.title} ${doc.info.version}: the maps the client is typed by.`,
  ...entry({
    methods: { $ref: "#/definitions/Methods" },
    notifications: { $ref: "#/definitions/Notifications" },
    clientRequests: { $ref: "#/definitions/ClientRequests" },
  }),
  definitions: {
    ...doc.components.schemas,
    Methods: { title: "Methods", ...entry(methods) },
    Notifications: { title: "Notifications", ...entry(notifications) },
    ClientRequests: { title: "ClientRequests", ...entry(requests) },
  },
});

const banner = `/* Generated from ${doc.info.title} ${doc.info.version} (OpenRPC ${doc.openrpc}) by scripts/generate.mjs; do not edit. */`;
const code = await compile(root, "BbridgeApi", {
  bannerComment: banner,
  additionalProperties: true, // later daemons may add fields; the schemas that forbid them say so
  unreachableDefinitions: true,
  strictIndexSignatures: true,
  style: { singleQuote: false, printWidth: 120 },
});
const codes = doc.methods[0].errors.map((e) => `  ${e.message}: ${e.code},`).join("\n");
const errors = `\n/** The daemon's JSON-RPC error codes (the \`errors\` of every method). */\nexport const ErrorCodes = {\n${codes}\n} as const;\n`;
writeFileSync(target, code + errors);

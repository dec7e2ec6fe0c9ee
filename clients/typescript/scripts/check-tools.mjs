// Run before `npm run generate` and `npm run build` (npm's `pre` scripts): both need the package's pinned tools
// (its devDependencies) in node_modules, and without them node and tsc fail with a bare "Cannot find module" or
// "tsc: not found". This says what to run instead. `make ts-client` installs them into the repository's
// `.cache/ts` and links it here as node_modules; `npm install` here installs them in place.
import { existsSync, readFileSync } from "node:fs";

const root = new URL("../", import.meta.url);
const { devDependencies } = JSON.parse(readFileSync(new URL("package.json", root), "utf8"));
const missing = Object.keys(devDependencies).filter(
  (name) => !existsSync(new URL(`node_modules/${name}/package.json`, root)),
);
if (missing.length > 0) {
  console.error(
    `@bbridge/client: ${missing.join(", ")} not installed in ${new URL("node_modules", root).pathname}. ` +
      "Run `make ts-client` from the repository root (or `npm install` here), then `npm run build` again.",
  );
  process.exit(1);
}

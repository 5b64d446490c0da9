#!/usr/bin/env node
// The vpps command. In a source checkout it runs the TypeScript sources through tsx, so `npx vpps` works right
// after `npm install` and never runs stale output; an installed package (no src/) runs the compiled dist/.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src", "cli", "main.ts");
let entry = join(root, "dist", "cli", "main.js");
if (existsSync(source)) {
  const { register } = await import("tsx/esm/api");
  register();
  entry = source;
}
// runCli (src/cli/main.ts) is the one handler of the command's errors and sets the exit status
const { runCli } = await import(pathToFileURL(entry).href);
await runCli(process.argv);

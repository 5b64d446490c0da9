#!/usr/bin/env node
// The vpps command. In a source checkout it runs the TypeScript sources through tsx, so `npx vpps` works right
// after `npm install` and never runs stale output; an installed package (no src/) runs the compiled dist/.
import { existsSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// VPPS compiles its kernel variants with NVRTC on libuv's worker threads, four at a time unless told otherwise: one
// per core instead (set before anything uses the threadpool; an explicit UV_THREADPOOL_SIZE stands)
process.env.UV_THREADPOOL_SIZE ??= String(Math.min(availableParallelism(), 32));
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

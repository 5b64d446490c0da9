/**
 * What the commands write on stdout goes through `writeOut`, so that a reader that has gone away (`vpps train … |
 * head -1`) ends the command quietly at its next line, instead of an unhandled EPIPE trace after the whole run.
 *
 * `process.stdout.write` cannot tell: on a pipe, Node reports EPIPE only as an 'error' event on a later tick, which a
 * synchronous training loop never reaches before it ends. Writing the file descriptor directly fails at once.
 */
import { writeSync } from "node:fs";
import { UserError } from "../util/errors.js";
import { fsErrorReason } from "../util/files.js";

const advice = (code: string): string =>
  code === "ENOSPC" || code === "EDQUOT"
    ? "free space on the disk it goes to, or send it elsewhere"
    : "send it to another file or pipe";

/** Thrown by `writeOut` once stdout's reader has closed the pipe; main.ts ends the command quietly. */
export class OutputClosed extends Error {
  constructor() {
    super("stdout was closed by its reader");
    this.name = "OutputClosed";
  }
}

/** The exit status of a command whose stdout was closed: 128 + SIGPIPE, as a Unix tool killed by the signal has. */
export const OUTPUT_CLOSED_STATUS = 141;

let redirected: ((text: string) => void) | null = null;

/** Sends what `writeOut` writes to `write` instead of stdout (null: stdout again); for tests running main in-process. */
export function redirectOutput(write: ((text: string) => void) | null): void {
  redirected = write;
}

/** Writes `text` to stdout, all of it before returning; throws `OutputClosed` when stdout's reader has gone. */
export function writeOut(text: string): void {
  if (redirected) {
    redirected(text);
    return;
  }
  if (process.stdout.isTTY) {
    process.stdout.write(text); // a terminal: synchronous, and it does not close under us
    return;
  }
  const bytes = Buffer.from(text, "utf8");
  let done = 0;
  while (done < bytes.length) {
    try {
      done += writeSync(1, bytes, done);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "EPIPE") throw new OutputClosed();
      // a full disk or another failure of the file stdout was sent to: the user's to fix, in one line
      if (code !== "EAGAIN" && code !== undefined) {
        throw new UserError(`cannot write the output (stdout): ${fsErrorReason(e)}; ${advice(code)}`, { cause: e });
      }
      // Node makes a pipe it has opened as process.stdout non-blocking: a full pipe is waited for, not an error
      if (code !== "EAGAIN") throw e;
      Atomics.wait(PAUSE, 0, 0, 1);
    }
  }
}

const PAUSE = new Int32Array(new SharedArrayBuffer(4));

/** Whether `e` is a stream error that means the reader has gone: EPIPE, or a write to a stream destroyed by it. */
export function isClosedPipe(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | null)?.code;
  return code === "EPIPE" || code === "ERR_STREAM_DESTROYED";
}

/**
 * What the commands write on stdout goes through `writeOut`, so that a reader that has gone away (`vpps train … |
 * head -1`) ends the command quietly at its next line instead of an unhandled EPIPE trace after the whole run.
 */

/** Thrown by `writeOut` once stdout's reader has closed the pipe; main.ts ends the command quietly. */
export class OutputClosed extends Error {
  constructor() {
    super("stdout was closed by its reader");
    this.name = "OutputClosed";
  }
}

/** The exit status of a command whose stdout was closed: 128 + SIGPIPE, as a Unix tool killed by the signal has. */
export const OUTPUT_CLOSED_STATUS = 141;

/**
 * Writes `text` to stdout; throws `OutputClosed` when stdout is gone. A pipe whose reader has exited fails the write
 * with EPIPE, which Node reports only as an asynchronous 'error' event (while a training run keeps the event loop
 * busy it would never be seen); the stream is destroyed synchronously, though, which is checked here.
 */
export function writeOut(text: string): void {
  const out = process.stdout;
  if (out.destroyed) throw new OutputClosed();
  out.write(text);
  if (out.destroyed) throw new OutputClosed();
}

/** Whether `e` is a stream error that means the reader has gone: EPIPE, or a write to a stream destroyed by it. */
export function isClosedPipe(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | null)?.code;
  return code === "EPIPE" || code === "ERR_STREAM_DESTROYED";
}

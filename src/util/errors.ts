/**
 * The one line between "your input is wrong" and "vpps is wrong". A failure caused by what the user gave — a command
 * line, a data file, a saved run, a size too large — is a `UserError`: the command line prints its message as one
 * line, `vpps: <message>`, and exits with its `exitStatus`, without a stack trace (src/cli/main.ts). Anything else that
 * reaches the command line's handler is a bug in vpps and is printed with its trace.
 *
 * An error class opts in by extending `UserError` (or `UsageError` for a command line that cannot be parsed), so the
 * handler needs no list of classes. Its message must be one line that names the thing, the expected and the actual,
 * and says what to do; tokens taken from the input are cut with `quote` (src/util/text.ts).
 */
export class UserError extends Error {
  /** The exit status of the command that fails with it: 1, or 2 for a command line that cannot be parsed. */
  readonly exitStatus: number = 1;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A command line that cannot be parsed: an unknown option, a bad option value. Exit status 2, as getopt tools use. */
export class UsageError extends UserError {
  override readonly exitStatus: number = 2;
}

/** Whether `e` is a failure the user can fix (printed as one line) rather than a bug (printed with its trace). */
export function isUserError(e: unknown): e is UserError {
  return e instanceof UserError;
}

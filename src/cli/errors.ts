/** A user-facing failure: printed as one line, no stack trace. */
export class CliError extends Error {}

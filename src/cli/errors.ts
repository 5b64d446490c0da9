import { UserError } from "../util/errors.js";

/** A user-facing failure: printed as one line, no stack trace. */
export class CliError extends UserError {}

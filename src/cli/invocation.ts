/** The command line `main` runs (the arguments after `vpps`): the launcher of `--gpus N` starts the ranks with it. */
export const invocation: { args: readonly string[] } = { args: [] };

/**
 * Data parallelism, the face: ranks in the torchrun conventions (RANK, WORLD_SIZE, MASTER_ADDR/PORT), the
 * launcher that starts one process per GPU, and the process group that sums gradients over NCCL (device
 * engines) or over TCP through its comm worker (host engines).
 */
export {
  checkBatchSplit,
  RANK_VARIABLES,
  type RankEnv,
  RankEnvError,
  rankEnvFrom,
  rankEnvironment,
  rankShare,
  rankSplitFromEnv,
} from "./env.js";
export {
  DEFAULT_RENDEZVOUS_TIMEOUT_MS,
  ProcessGroup,
  type ProcessGroupOptions,
  RendezvousError,
  rendezvousTimeoutMs,
} from "./group.js";
export { describeExit, exitStatusOf, freePort, type LaunchSpec, launchRanks, RankFailedError } from "./launcher.js";

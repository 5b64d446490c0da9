import { formatCudaInfo, getCudaInfo } from "../cuda/index.js";
import { writeOut } from "./output.js";

/** `vpps info`: what the GPU and CUDA libraries are, or why the CPU engine will be used. */
export function runInfo(opts: { json: boolean }): void {
  const info = getCudaInfo();
  writeOut(opts.json ? `${JSON.stringify(info, null, 2)}\n` : `${formatCudaInfo(info)}\n`);
}

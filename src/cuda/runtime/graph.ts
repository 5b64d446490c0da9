// CUDA graphs by stream capture: the work queued on a stream — and on the streams forked from it through events and
// joined back — recorded once into a graph, instantiated, and replayed with one launch (cuGraphLaunch). A replay
// costs the host one call however many kernels the graph holds, so what bounds the overlap of concurrent kernels is
// no longer the host's launch cost (GLP4NN's ⌈T_kernel / T_launch⌉ term, docs/GLP4NN.md).
//
// Capture records and does not run: the captured calls must not synchronise, allocate device memory they then use
// outside the graph, or read results. Run the work once uncaptured first (buffers allocated, libraries loaded).

import { GraphNodeType, type Handle, type KernelNodeParams, StreamCaptureMode } from "../ffi/driver.js";
import type { CudaStream } from "./stream.js";

/** An instantiated graph; `launch` replays it. */
export class CudaGraph {
  private destroyed = false;

  private constructor(
    private readonly stream: CudaStream,
    readonly graph: Handle,
    readonly exec: Handle,
  ) {}

  /**
   * Captures what `body` queues on `stream` (and on streams that fork from and join back to it) and instantiates it.
   * When `body` throws, the capture is ended and its graph dropped, and the error is rethrown.
   */
  static capture(stream: CudaStream, body: () => void): CudaGraph {
    const driver = stream.driver;
    driver.streamBeginCapture(stream.handle, StreamCaptureMode.Relaxed);
    let graph: Handle;
    try {
      body();
    } catch (e) {
      try {
        const g = driver.streamEndCapture(stream.handle);
        if (g !== 0n) driver.graphDestroy(g);
      } catch {
        // the capture was invalidated by the failure: nothing to free
      }
      throw e;
    }
    graph = driver.streamEndCapture(stream.handle);
    try {
      return new CudaGraph(stream, graph, driver.graphInstantiate(graph));
    } catch (e) {
      driver.graphDestroy(graph);
      throw e;
    }
  }

  /** Replays the graph on `stream` (default: the stream it was captured on). */
  launch(stream: CudaStream = this.stream): void {
    this.stream.driver.graphLaunch(this.exec, stream.handle);
  }

  /** The number of nodes (kernels, memsets, event waits as empty nodes, …). */
  nodeCount(): number {
    return this.stream.driver.graphNodes(this.graph).length;
  }

  /**
   * The graph's kernel nodes with their functions and shapes: what a library (cuBLAS) launched, read without CUPTI.
   * Empty where the driver cannot report a kernel node's parameters.
   */
  kernelNodes(): KernelNodeParams[] {
    const driver = this.stream.driver;
    const out: KernelNodeParams[] = [];
    for (const node of driver.graphNodes(this.graph)) {
      if (driver.graphNodeType(node) !== GraphNodeType.Kernel) continue;
      const p = driver.graphKernelNodeParams(node);
      if (p !== undefined) out.push(p);
    }
    return out;
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    const driver = this.stream.driver;
    driver.graphExecDestroy(this.exec);
    driver.graphDestroy(this.graph);
  }
}

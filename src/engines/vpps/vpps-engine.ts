/**
 * VPPS behind the common Engine interface, so that the CLI and the training loop can use it. The loop calls
 * forwardScalar → backward → update(trainer) per batch and needs the loss at once, so here one batch is one
 * synchronous `fb` (the overlap of host and GPU is the `Vpps` API's, which returns the previous loss instead).
 *
 * The update runs inside the kernel, so the learning rate must be known when the batch is launched: the first
 * batch runs once with learning rate 0 (which changes nothing) to produce its loss, and again with the trainer's
 * settings at update(); later batches use the settings of the previous update() call. Forward-only passes
 * (evaluation) run on the CPU reference over weights read back from the GPU.
 */
import type { ComputationGraph, Expression } from "../../graph/graph.js";
import type { ParameterCollection } from "../../model/parameters.js";
import { SimpleSGDTrainer, type Trainer } from "../../train/trainers.js";
import { CpuEngine } from "../cpu.js";
import type { Engine } from "../engine.js";
import { Vpps, type VppsOptions } from "./engine.js";

export class VppsEngine implements Engine {
  readonly name = "vpps";
  readonly vpps: Vpps;
  private sgd: { lr: number; clip: number } | undefined;
  private pending: { g: ComputationGraph; loss: Expression } | undefined;
  private lastLoss: { e: Expression; value: number } | undefined;
  private cpu: CpuEngine | undefined;
  private weightsOnHost = false;

  constructor(
    private readonly params: ParameterCollection,
    options: VppsOptions = {},
  ) {
    // every batch waits for its own loss here, so schedule workers would only add a thread hop
    this.vpps = Vpps.createSync(params, { scheduleWorkers: 0, ...options });
  }

  forward(e: Expression): void {
    // Evaluation: the script format needs a scalar loss to run backward and update; plain forward passes are rare
    // (once per epoch) and run on the CPU engine over the current weights.
    if (!this.weightsOnHost) this.syncToHost();
    this.cpu ??= new CpuEngine(this.params);
    this.cpu.forward(e);
  }

  forwardScalar(e: Expression): number {
    const g = e.graph;
    const sgd = this.sgd;
    this.vpps.learningRate = sgd?.lr ?? 0;
    this.vpps.clip = sgd?.clip ?? 0;
    this.vpps.fb(g, e);
    const value = this.vpps.latestLossSync();
    this.weightsOnHost = false;
    this.pending = sgd === undefined ? { g, loss: e } : undefined;
    this.lastLoss = { e, value };
    return value;
  }

  backward(loss: Expression): void {
    if (this.lastLoss?.e !== loss) this.forwardScalar(loss);
  }

  value(e: Expression): Float32Array {
    if (this.lastLoss?.e === e) return Float32Array.of(this.lastLoss.value);
    if (!this.cpu) {
      throw new Error("vpps engine: value() is available for the loss of the last batch and after forward()");
    }
    return this.cpu.value(e);
  }

  gradient(_e: Expression): Float32Array {
    throw new Error(
      "vpps engine: per-node gradients stay inside the kernel; use the cpu, eager or autobatch engine to inspect them",
    );
  }

  update(trainer: Trainer): void {
    if (!(trainer instanceof SimpleSGDTrainer)) {
      throw new Error(
        `vpps engine: the kernel updates weights with SGD only; got the ${trainer.constructor.name}. ` +
          "Use --optimizer sgd with --engine vpps",
      );
    }
    this.sgd = { lr: trainer.learningRate, clip: trainer.clipThreshold };
    if (this.pending) {
      const { g, loss } = this.pending;
      this.pending = undefined;
      this.vpps.learningRate = this.sgd.lr;
      this.vpps.clip = this.sgd.clip;
      this.vpps.fb(g, loss);
      this.vpps.latestLossSync();
    }
  }

  syncToHost(): void {
    this.vpps.syncToHost();
    this.weightsOnHost = true;
  }

  dispose(): void {
    this.vpps.dispose();
  }
}

import type { Module } from '../core/module.js';
import type { Tensor } from '../core/tf.js';
import { RandomSampler, type Sampler } from '../data/sampler.js';
import { SingleProcessGroup, type ProcessGroup } from '../core/process-group.js';

/** What a strategy needs to make the training sampler. */
export interface SamplerOptions {
  /** Dataset size. */
  length: number;
  seed: number;
  /** Samples per batch on this process. */
  localBatch: number;
  dropLast: boolean;
}

/** Injection token of the {@link Strategy}. */
export const STRATEGY = Symbol.for('ssl-zoo.Strategy');

/** Injection token of the run's {@link ProcessGroup} (the strategy's), for components resolved from a run's container. */
export const PROCESS_GROUP = Symbol.for('ssl-zoo.ProcessGroup');

/**
 * How training is spread over processes (Lightning's strategy). The trainer calls these
 * hooks; only implementations in `src/distributed` talk to other processes.
 */
export interface Strategy {
  readonly name: string;
  /** The group losses gather over and gradients are reduced over. */
  readonly group: ProcessGroup;
  /** Whether this is the process that prints, logs and writes checkpoints. */
  readonly isGlobalZero: boolean;
  /** Makes the model identical on every rank (broadcast from rank 0). */
  setup(model: Module): void;
  /**
   * Turns each rank's gradients (keyed by variable name, for `variables`) into the
   * gradients every rank applies; returns new tensors and disposes the inputs it replaces.
   */
  reduceGradients(grads: Record<string, Tensor>, variables: readonly Tensor[]): Record<string, Tensor>;
  /**
   * Averages scalar metrics over ranks (for logging). Every rank must get the same result:
   * the trainer's non-finite check reads it, so that all ranks stop at the same step.
   */
  reduceMetrics(values: Record<string, number>): Record<string, number>;
  /**
   * The elementwise maximum of `values` over ranks, the same on every rank (one small
   * all-reduce): for decisions all ranks must share, e.g. "did any rank see a problem".
   */
  allReduceMax(values: number[]): number[];
  /** The training sampler of this process (a shard of the epoch's permutation under DDP). */
  sampler(options: SamplerOptions): Sampler;
  barrier(): void;
  teardown(): void;
}

/** One process: every hook is the identity. */
export class SingleDeviceStrategy implements Strategy {
  readonly name = 'single';
  readonly group: ProcessGroup = new SingleProcessGroup();
  readonly isGlobalZero = true;
  setup(): void {}
  reduceGradients(grads: Record<string, Tensor>): Record<string, Tensor> {
    return grads;
  }
  reduceMetrics(values: Record<string, number>): Record<string, number> {
    return values;
  }
  allReduceMax(values: number[]): number[] {
    return values;
  }
  sampler(options: SamplerOptions): Sampler {
    return new RandomSampler(options.length, options.seed);
  }
  barrier(): void {}
  teardown(): void {}
}

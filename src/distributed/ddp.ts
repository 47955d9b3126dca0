import 'reflect-metadata';
import { inject, injectable } from 'tsyringe';
import type { Module } from '../core/module.js';
import { tf, type Tensor } from '../core/tf.js';
import type { Sampler } from '../data/sampler.js';
import { PROCESS_GROUP, registerStrategy, type SamplerOptions, type Strategy } from '../trainer/strategy.js';
import type { ProcessGroup } from '../core/process-group.js';
import { DistributedSampler } from './sampler.js';
import { convertSyncBatchNorm } from './sync-batchnorm.js';

export interface DdpOptions {
  /** Gradient bucket size in MiB (PyTorch's default 25). */
  bucketCapMb?: number;
  /** Replace every BatchNorm by SyncBatchNorm at setup (global-batch statistics). */
  syncBatchNorm?: boolean;
}

/** Injection token of the {@link DdpOptions} (the run registers them from its config). */
export const DDP_OPTIONS = Symbol.for('ssl-zoo.DdpOptions');

/** Counts of collectives issued, for tests and diagnostics. */
export interface DdpStats {
  gradientAllReduces: number;
  broadcasts: number;
}

/**
 * Distributed data parallel (Lightning's `ddp` strategy) over a process group:
 *
 * - setup: optionally converts batch norms to SyncBatchNorm, then broadcasts every
 *   parameter and buffer (including EMA targets and other state DDP would not see) from
 *   rank 0, so every rank starts identical;
 * - gradients: concatenated into ~`bucketCapMb` buckets (in parameter order) and averaged
 *   with one all-reduce per bucket. The scale convention that makes this exact is
 *   written once, in `collectives.ts`. A parameter with no gradient on this rank
 *   contributes zeros, so the collectives never hang; one with no gradient on any rank is
 *   left without one, as in a single process. The "has a gradient" flags travel in the
 *   last bucket, so a model that fits one bucket costs one all-reduce per step.
 *
 * Gradient accumulation and the gradient cache need no "no sync" mode: the trainer sums
 * the micro-batches' (or chunks') gradients locally and calls {@link reduceGradients}
 * once per optimizer step.
 *
 * Registered as `ddp` (see `registerStrategy`); resolved from a run's container it gets the
 * job's {@link PROCESS_GROUP} and the {@link DDP_OPTIONS}. The group stays its creator's to
 * close. A subclass must repeat the constructor with its `@inject` decorators (tsyringe reads
 * them from the class itself) and be `@injectable()`.
 */
@injectable()
export class DdpStrategy implements Strategy {
  readonly stats: DdpStats = { gradientAllReduces: 0, broadcasts: 0 };
  private readonly bucketCapBytes: number;

  constructor(
    @inject(PROCESS_GROUP) readonly group: ProcessGroup,
    @inject(DDP_OPTIONS) private readonly options: DdpOptions = {},
  ) {
    this.bucketCapBytes = Math.max(1, (options.bucketCapMb ?? 25) * 1024 * 1024);
  }

  get isGlobalZero(): boolean {
    return this.group.rank === 0;
  }

  setup(model: Module): void {
    if (this.options.syncBatchNorm) convertSyncBatchNorm(model, this.group);
    const state = [...model.namedParameters(), ...model.namedBuffers()].map(([, v]) => v);
    for (const bucket of this.buckets(state.map((v) => v.size))) {
      const flat = new Float32Array(bucket.size);
      for (const { index, offset } of bucket.members) flat.set(state[index].dataSync(), offset);
      this.group.broadcast(flat, 0);
      this.stats.broadcasts++;
      for (const { index, offset } of bucket.members) {
        const v = state[index];
        const values = tf.tensor(flat.subarray(offset, offset + v.size), v.shape, 'float32');
        v.assign(v.dtype === 'float32' ? values : tf.cast(values, v.dtype));
        values.dispose();
      }
    }
  }

  /**
   * Each bucket is concatenated on the device (`[bucket size]`, plus the "has a gradient"
   * flags in the last), and all buckets' asynchronous reads are queued at once; each bucket
   * is all-reduced as soon as its read completes, while the device copies the next ones, and
   * uploaded. (tfjs's backward pass is one synchronous call, so the reads cannot start before
   * it ends: they overlap one another and the all-reduces, not the backward pass.)
   */
  async reduceGradients(grads: Record<string, Tensor>, variables: readonly Tensor[]): Promise<Record<string, Tensor>> {
    const sizes = variables.map((v) => v.size);
    const buckets = this.buckets(sizes);
    const hasGradient = new Float32Array(variables.length);
    variables.forEach((v, i) => (hasGradient[i] = grads[(v as tf.Variable).name] ? 1 : 0));
    const onDevice = buckets.map((bucket, b) =>
      tf.tidy(() => {
        const parts = bucket.members.map(({ index }) => {
          const g = grads[(variables[index] as tf.Variable).name];
          return g ? tf.reshape(g, [-1]) : tf.zeros([sizes[index]!]);
        });
        if (b === buckets.length - 1) parts.push(tf.tensor1d(hasGradient));
        return parts.length === 1 ? tf.clone(parts[0]!) : tf.concat(parts);
      }),
    );
    const reads = onDevice.map((t) => t.data() as Promise<Float32Array>);
    const flats: Float32Array[] = [];
    try {
      for (const read of reads) {
        // A copy: the read may alias the tensor's own storage (the CPU engines).
        const flat = Float32Array.from(await read);
        // The flags are averaged too: zero exactly when no rank had a gradient.
        this.group.allReduce(flat, 'avg');
        this.stats.gradientAllReduces++;
        flats.push(flat);
      }
    } finally {
      tf.dispose(onDevice);
    }
    const reduced: Record<string, Tensor> = {};
    const lastFlat = flats[flats.length - 1]!;
    const lastBucket = buckets[buckets.length - 1]!;
    buckets.forEach((bucket, b) => {
      for (const { index, offset } of bucket.members) {
        const v = variables[index] as tf.Variable;
        if (lastFlat[lastBucket.size + index] === 0) continue; // no rank had a gradient
        reduced[v.name] = tf.tensor(flats[b]!.subarray(offset, offset + v.size), v.shape, 'float32');
      }
    });
    return reduced;
  }

  reduceMetrics(values: Record<string, number>): Record<string, number> {
    const keys = Object.keys(values).sort();
    const flat = Float32Array.from(keys.map((k) => values[k]));
    this.group.allReduce(flat, 'avg');
    return Object.fromEntries(keys.map((k, i) => [k, flat[i]]));
  }

  allReduceMax(values: number[]): number[] {
    const flat = Float32Array.from(values);
    this.group.allReduce(flat, 'max');
    return Array.from(flat);
  }

  sampler(options: SamplerOptions): Sampler {
    return new DistributedSampler({ ...options, rank: this.group.rank, worldSize: this.group.worldSize });
  }

  barrier(): void {
    this.group.barrier();
  }

  /** Nothing to release: the group is closed by whoever created it. */
  teardown(): void {}

  /** Consecutive tensors packed into buckets of at most the cap (a larger tensor gets its own). */
  private buckets(sizes: number[]): Array<{ size: number; members: Array<{ index: number; offset: number }> }> {
    const capElements = Math.max(1, Math.floor(this.bucketCapBytes / 4));
    const out: Array<{ size: number; members: Array<{ index: number; offset: number }> }> = [];
    let current = { size: 0, members: [] as Array<{ index: number; offset: number }> };
    sizes.forEach((size, index) => {
      if (current.members.length > 0 && current.size + size > capElements) {
        out.push(current);
        current = { size: 0, members: [] };
      }
      current.members.push({ index, offset: current.size });
      current.size += size;
    });
    out.push(current);
    return out;
  }
}

registerStrategy('ddp', DdpStrategy);

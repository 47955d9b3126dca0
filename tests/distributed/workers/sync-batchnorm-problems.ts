/**
 * Shared by tests/distributed/sync-batchnorm.test.ts and workers/sync-batchnorm.ts: seeded
 * global batches (every rank takes its slice, so ranks see different data), the per-rank
 * loss, and a collective-counting wrapper of a process group.
 */
import { Rng } from '../../../src/core/random.js';
import { type Scalar, type Tensor, tf } from '../../../src/core/tf.js';
import type { ProcessGroup } from '../../../src/core/process-group.js';

/** One SyncBatchNorm problem: per-rank input shape `[B, ...spatial, C]`. */
export interface BnProblem {
  label: string;
  worldSize: number;
  /** Local batch B. */
  batch: number;
  /** Spatial dims between batch and channels ([] for [B, C], [H, W] for NHWC). */
  spatial: number[];
  channels: number;
  seed: number;
}

/** The global shape `[W·B, ...spatial, C]`. */
export function globalShape(p: BnProblem): number[] {
  return [p.worldSize * p.batch, ...p.spatial, p.channels];
}

/** The local shape `[B, ...spatial, C]`. */
export function localShape(p: BnProblem): number[] {
  return [p.batch, ...p.spatial, p.channels];
}

/**
 * Global batch number `step` `[W·B, ...spatial, C]`: channel c has mean 3 + c (a mean large
 * against the spread, where E[x²] − E[x]² would lose digits) and std 0.5 + 0.25c, plus a
 * per-rank shift so that the ranks' statistics differ.
 */
export function globalInput(p: BnProblem, step: number): Float32Array {
  const rng = new Rng(p.seed * 1000 + step);
  const shape = globalShape(p);
  const size = shape.reduce((a, b) => a * b, 1);
  const perRank = size / p.worldSize;
  const out = rng.normalArray(size);
  for (let i = 0; i < size; i++) {
    const c = i % p.channels;
    const rank = Math.floor(i / perRank);
    out[i] = 3 + c + 0.4 * rank + (0.5 + 0.25 * c) * out[i]!;
  }
  return out;
}

/** Loss weights R, same shape as the global input. */
export function lossWeights(p: BnProblem): Float32Array {
  const shape = globalShape(p);
  return new Rng(p.seed + 77).normalArray(shape.reduce((a, b) => a * b, 1));
}

/** Affine parameters γ (around 1) and β, `[C]` each. */
export function affine(p: BnProblem): { weight: Float32Array; bias: Float32Array } {
  const rng = new Rng(p.seed + 5);
  return {
    weight: rng.normalArray(p.channels, 1, 0.3),
    bias: rng.normalArray(p.channels, 0, 0.5),
  };
}

/** Rows `rank·B ..` of a global array (flattened). */
export function rankSlice(p: BnProblem, global: Float32Array, rank: number): Float32Array {
  const n = global.length / p.worldSize;
  return global.slice(rank * n, (rank + 1) * n);
}

/**
 * The per-rank loss: the mean over the rank's B samples of Σ (R·y + ½y²) over each sample's
 * entries (so the mean over ranks is the same expression over the global batch).
 */
export function bnLoss(y: Tensor, r: Tensor): Scalar {
  return tf.div(tf.sum(tf.add(tf.mul(r, y), tf.mul(0.5, tf.square(y)))), y.shape[0]!) as Scalar;
}

/** `group`, with a count of the collectives called through it. */
export function countingGroup(group: ProcessGroup): { group: ProcessGroup; calls: { n: number } } {
  const calls = { n: 0 };
  const counted: ProcessGroup = {
    rank: group.rank,
    worldSize: group.worldSize,
    allReduce: (d, op) => (calls.n++, group.allReduce(d, op)),
    allGather: (d) => (calls.n++, group.allGather(d)),
    reduceScatter: (d) => (calls.n++, group.reduceScatter(d)),
    broadcast: (d, root) => (calls.n++, group.broadcast(d, root)),
    barrier: () => (calls.n++, group.barrier()),
    close: () => group.close(),
  };
  return { group: counted, calls };
}

/**
 * A deliberately non-symmetric, SimCLR-like per-rank loss used by the gradient tests, both
 * in the worker processes (with `all` = allGather(local)) and in the one-process reference
 * (with `all` = the full batch). Shapes: local [B, D], all [N = W·B, D], weights [B].
 *
 * Row i of rank r: logits against all N candidates (temperature 0.5), self column r·B + i
 * masked, positive at column ((r+1) mod W)·B + (i+1) mod B (another rank's sample), and a
 * per-anchor weight; the loss is the MEAN over local anchors (scale convention of
 * src/distributed/collectives.ts).
 */
import { type Scalar, type Tensor, tf } from '../../src/core/tf.js';

export function rankLoss(local: Tensor, all: Tensor, rank: number, worldSize: number, weights: Tensor): Scalar {
  const B = local.shape[0]!;
  const N = all.shape[0]!;
  const selfMask = new Float32Array(B * N);
  const positive = new Float32Array(B * N);
  for (let i = 0; i < B; i++) {
    selfMask[i * N + rank * B + i] = -1e9;
    positive[i * N + ((rank + 1) % worldSize) * B + ((i + 1) % B)] = 1;
  }
  const logits = tf.add(tf.div(tf.matMul(local, all, false, true), 0.5), tf.tensor2d(selfMask, [B, N]));
  const perAnchor = tf.sub(tf.logSumExp(logits, 1), tf.sum(tf.mul(logits, tf.tensor2d(positive, [B, N])), 1));
  return tf.mean(tf.mul(perAnchor, weights)) as Scalar;
}

/** Inputs of the allGather gradient test, all derived from a seed. */
export interface GatherProblem {
  worldSize: number;
  /** Local batch B. */
  batch: number;
  inDim: number;
  outDim: number;
  seed: number;
}

/** Rank r's inputs [B, inDim] and weights [B], and the shared θ [inDim, outDim], as arrays. */
export function problemData(p: GatherProblem, seededFloats: (seed: number, n: number) => Float32Array) {
  const inputs = Array.from({ length: p.worldSize }, (_, r) => seededFloats(p.seed + 101 * (r + 1), p.batch * p.inDim));
  const weights = Array.from({ length: p.worldSize }, (_, r) => seededFloats(p.seed + 7 * (r + 1), p.batch).map((v) => 1.5 + v));
  const theta = seededFloats(p.seed + 99991, p.inDim * p.outDim);
  return { inputs, weights, theta };
}

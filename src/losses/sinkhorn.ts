/**
 * SwAV's Sinkhorn-Knopp assignments (Caron et al. 2020; solo-learn's `SinkhornKnopp`), over
 * the global batch (docs/design.md contract 7).
 */
import { invalidValue } from '../core/errors.js';
import { tf } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, constantFrom, reduceValuesOverRanks, type BatchLayout } from './global-batch.js';
import { checkPositive } from './ops.js';

export interface SinkhornOptions {
  /** Entropy regularisation ε > 0: the scores are turned into exp(score / ε) (solo-learn: 0.05). */
  epsilon: number;
  /** Number of prototype-then-sample normalisation rounds, an integer ≥ 1 (solo-learn: 3). */
  iterations: number;
  /**
   * Scores `[S, K]` of rows every rank holds identically (SwAV's queue of past embeddings
   * against the prototypes): part of the matrix being normalised, counted once however many
   * ranks there are, and not returned (solo-learn: `sk(cat(p, p_queue))[:B]`).
   */
  queueScores?: tf.Tensor2D;
}

/** solo-learn's SwAV defaults: ε = 0.05, 3 iterations. */
export const SINKHORN_DEFAULTS: Readonly<Omit<SinkhornOptions, 'queueScores'>> = Object.freeze({ epsilon: 0.05, iterations: 3 });

/**
 * Sinkhorn-Knopp: soft assignments of samples to prototypes with equal prototype shares.
 * Starting from `Q = exp(scores / ε)` over the M rows of the global batch (N = W·B batch rows,
 * plus the S queue rows), each iteration divides every prototype column by its sum over all M
 * rows (each prototype's total becomes 1/K) and then every row by its sum (each sample's total
 * becomes 1/M); the result is scaled so that every row sums to 1.
 *
 * - `scores`: `[B, K]` this rank's scores (cosine similarities to the K prototypes).
 * - Returns `[B, K]` float32, this rank's rows of the one-process Q: a constant (as solo-learn's
 *   `torch.no_grad`): `scores` and `queueScores` get exactly zero gradient through it.
 *
 * Exact over W ranks: the prototype sums `[K]` are all-reduced (sum) at every iteration, and
 * the stabilising per-prototype maximum `[K]` once (max), through the process group
 * (`reduceValuesOverRanks`): iterations + 1 all-reduces, none in backward. A per-rank
 * Sinkhorn (solo-learn with `world_size` 1 under DDP) equalises the prototypes' shares within
 * each rank's batch instead, which changes the assignments.
 *
 * Computed in float64, with the same result as solo-learn's in exact arithmetic: solo-learn's
 * first division by the total and its divisions by K and M are constant factors that the next
 * normalisation cancels, and so is subtracting each prototype's maximum score before exp
 * (which keeps exp(score / ε) finite for small ε).
 */
export function sinkhornKnopp(scores: tf.Tensor2D, options: SinkhornOptions = SINKHORN_DEFAULTS, group?: ProcessGroup): tf.Tensor2D {
  const { epsilon, iterations, queueScores } = options;
  checkScores('scores', scores, undefined);
  if (queueScores !== undefined) checkScores('queueScores', queueScores, scores.shape[1]);
  checkPositive('epsilon', epsilon);
  if (!(Number.isInteger(iterations) && iterations >= 1)) throw invalidValue('iterations', iterations, 'an integer >= 1');
  const layout = batchLayout('sinkhornKnopp', scores.shape[0], group);
  const k = scores.shape[1];
  const local = Float64Array.from(scores.dataSync());
  const queue = queueScores ? Float64Array.from(queueScores.dataSync()) : new Float64Array(0);
  const q = exponentiate(local, queue, k, epsilon, layout);
  const rows = q.length / k;
  const localRows = layout.localBatch;
  for (let it = 0; it < iterations; it++) {
    // Prototype columns: Σ over the local rows, all-reduced, plus the queue rows (the same on every rank).
    const localSums = columnSums(q, 0, localRows, k);
    const sums = reduceValuesOverRanks(localSums, layout, 'sum');
    const queueSums = columnSums(q, localRows, rows, k);
    for (let c = 0; c < k; c++) sums[c] = sums[c]! + queueSums[c]!;
    for (let r = 0; r < rows; r++) for (let c = 0; c < k; c++) q[r * k + c] = q[r * k + c]! / sums[c]!;
    // Sample rows: local.
    for (let r = 0; r < rows; r++) {
      let total = 0;
      for (let c = 0; c < k; c++) total += q[r * k + c]!;
      for (let c = 0; c < k; c++) q[r * k + c] = q[r * k + c]! / total;
    }
  }
  // Checked after the loop, so that no rank leaves the others waiting in a collective.
  if (!q.every(Number.isFinite)) {
    throw new Error(
      `sinkhornKnopp: a row's scores all vanished under exp((score − max) / ε) with ε = ${epsilon}, or a score is not finite; use a larger epsilon`,
    );
  }
  const inputs = queueScores ? [scores, queueScores] : [scores];
  return constantFrom(inputs, Float32Array.from(q.subarray(0, localRows * k)), [localRows, k]) as tf.Tensor2D;
}

/** Checks a float32 `[rows, K]` score matrix (K = `k` if given). */
function checkScores(name: string, x: tf.Tensor, k: number | undefined): void {
  if (x.rank !== 2 || x.shape[1]! < 1) throw new Error(`sinkhornKnopp: ${name} must be [rows, K], got shape [${x.shape.join(', ')}]`);
  if (x.dtype !== 'float32') throw new Error(`sinkhornKnopp: ${name} must be float32, got ${x.dtype}`);
  if (k !== undefined && x.shape[1] !== k) throw new Error(`sinkhornKnopp: ${name} [${x.shape.join(', ')}] must have K = ${k} columns, as scores`);
}

/**
 * `exp((s − m_c) / ε)` of the local rows then the queue rows, `[(B + S)·K]` row-major, where
 * m_c is prototype c's largest score over the global batch and the queue.
 */
function exponentiate(local: Float64Array, queue: Float64Array, k: number, epsilon: number, layout: BatchLayout): Float64Array {
  const localMax = new Float64Array(k).fill(-Infinity);
  for (let i = 0; i < local.length; i++) localMax[i % k] = Math.max(localMax[i % k]!, local[i]!);
  const max = reduceValuesOverRanks(localMax, layout, 'max');
  for (let i = 0; i < queue.length; i++) max[i % k] = Math.max(max[i % k]!, queue[i]!);
  const q = new Float64Array(local.length + queue.length);
  q.set(local);
  q.set(queue, local.length);
  for (let i = 0; i < q.length; i++) q[i] = Math.exp((q[i]! - max[i % k]!) / epsilon);
  return q;
}

/** Σ over rows `from .. to − 1` of each of the k columns of the row-major `q`. */
function columnSums(q: Float64Array, from: number, to: number, k: number): Float64Array {
  const sums = new Float64Array(k);
  for (let r = from; r < to; r++) for (let c = 0; c < k; c++) sums[c] = sums[c]! + q[r * k + c]!;
  return sums;
}

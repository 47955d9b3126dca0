/**
 * K-means on the unit sphere (DeepCluster v2's clustering of its memory bank; solo-learn's
 * `solo/utils/kmeans.py`), with the work spread over the ranks and the result of one process
 * (docs/design.md contract 7).
 */
import { invalidValue } from '../core/errors.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Tensor1D, type Tensor2D } from '../core/tf.js';

/**
 * Makes an E step's assignment from its scores `[m, K]` instead of `argMax`: `[m]` int32
 * (verify records and replays k-means assignments through it: src/methods/decisions.ts).
 */
export type AssignFn = (scores: Tensor2D) => Tensor1D;
import { batchLayout, gatherConstantRows, sumValuesOverRanksExact, type BatchLayout } from './global-batch.js';

/** What {@link sphericalKMeans} returns. */
export interface KMeansResult {
  /** `[n]` the cluster of every row (its most similar centroid after the last iteration). */
  assignments: Int32Array;
  /** `[K, D]` L2-normalised centroids. */
  centroids: Float32Array;
}

/** Rows scored against the centroids per matrix product (bounds the `[rows, K]` scores' memory). */
const SCORE_BLOCK = 1024;

/**
 * Spherical k-means of `rows` `[n, D]` (every rank passes the same rows: DeepCluster v2's bank,
 * written from gathered data) from the centroids `initial` `[K, D]`: `iterations` rounds of
 * (E) assign every row to the centroid of largest inner product, (M) set every centroid that
 * got rows to the L2-normalised mean of its rows (one that got none keeps its value), then a
 * last E step for the returned assignments, as solo-learn.
 *
 * Spread over the W ranks of `group` (or of the method's scoped group): rank r scores only its
 * contiguous shard of about n / W rows; the per-centroid sums `[K, D]` and counts `[K]` of the
 * shards are summed over ranks at every iteration (in float64, {@link sumValuesOverRanksExact})
 * and the shards' final assignments are all-gathered. So the centroids and assignments are the
 * one-process ones (the sums up to float64 round-off, far below the float32 the centroids are
 * rounded to), while a per-rank k-means (solo-learn without the all-reduce) would cluster
 * each rank's rows apart. Collectives: `iterations + 1`, the same on every rank.
 */
export function sphericalKMeans(
  rows: Float32Array,
  dim: number,
  initial: Float32Array,
  iterations: number,
  group?: ProcessGroup,
  assignWith?: AssignFn,
): KMeansResult {
  if (!(Number.isInteger(dim) && dim >= 1) || rows.length % dim !== 0)
    throw invalidValue('dim', dim, `an integer >= 1 that divides the ${rows.length} row values`);
  if (initial.length === 0 || initial.length % dim !== 0) throw invalidValue('initial', `${initial.length} values`, `K >= 1 centroids of ${dim} values`);
  if (!(Number.isInteger(iterations) && iterations >= 0)) throw invalidValue('iterations', iterations, 'an integer >= 0');
  const n = rows.length / dim;
  const k = initial.length / dim;
  const layout = batchLayout('sphericalKMeans', n, group);
  const [start, end] = shardOf(n, layout);
  const shard = rows.subarray(start * dim, end * dim);
  let centroids: Float32Array = Float32Array.from(initial);
  let local = assign(shard, dim, centroids, assignWith);
  for (let it = 0; it < iterations; it++) {
    // Sums [K, D] then counts [K], in float64, summed over ranks.
    const totals = new Float64Array(k * dim + k);
    for (let i = 0; i < local.length; i++) {
      const c = local[i]!;
      for (let d = 0; d < dim; d++) totals[c * dim + d] = totals[c * dim + d]! + shard[i * dim + d]!;
      totals[k * dim + c] = totals[k * dim + c]! + 1;
    }
    centroids = updateCentroids(sumValuesOverRanksExact(totals, layout), centroids, k, dim);
    local = assign(shard, dim, centroids, assignWith);
  }
  return { assignments: gatherShards(local, n, layout), centroids };
}

/** Rows `[start, end)` of this rank's shard: contiguous, sizes differing by at most one. */
function shardOf(n: number, layout: BatchLayout): [number, number] {
  const { rank, worldSize } = layout;
  return [Math.floor((rank * n) / worldSize), Math.floor(((rank + 1) * n) / worldSize)];
}

/**
 * `[m]` the centroid of largest inner product for each row of `rows` `[m, D]` (the first on
 * ties). With `assignWith` (verify), the assignment is its choice, all m rows in one call (one
 * E step, one call: the shards' calls then line up with one process's).
 */
function assign(rows: Float32Array, dim: number, centroids: Float32Array, assignWith?: AssignFn): Int32Array {
  const m = rows.length / dim;
  const out = new Int32Array(m);
  if (m === 0) return out;
  const block = assignWith ? m : SCORE_BLOCK;
  tf.tidy(() => {
    const c = tf.tensor2d(centroids, [centroids.length / dim, dim]);
    for (let s = 0; s < m; s += block) {
      const size = Math.min(block, m - s);
      const scores = tf.matMul(tf.tensor2d(rows.subarray(s * dim, (s + size) * dim), [size, dim]), c, false, true) as Tensor2D;
      const chosen = assignWith ? assignWith(scores) : tf.argMax(scores, 1);
      out.set(chosen.dataSync() as Int32Array, s);
    }
  });
  return out;
}

/** The M step from summed `totals` (sums `[K, D]` then counts `[K]`): normalised means, rounded to float32. */
function updateCentroids(totals: Float64Array, previous: Float32Array, k: number, dim: number): Float32Array {
  const next = Float32Array.from(previous);
  for (let c = 0; c < k; c++) {
    const count = totals[k * dim + c]!;
    if (count === 0) continue;
    let norm = 0;
    for (let d = 0; d < dim; d++) norm += (totals[c * dim + d]! / count) ** 2;
    const scale = 1 / Math.max(Math.sqrt(norm), 1e-12);
    for (let d = 0; d < dim; d++) next[c * dim + d] = (totals[c * dim + d]! / count) * scale;
  }
  return next;
}

/** Every rank's shard of assignments, concatenated in rank order: `[n]` (each padded to ⌈n / W⌉ with -1 for the gather). */
function gatherShards(local: Int32Array, n: number, layout: BatchLayout): Int32Array {
  if (layout.worldSize === 1) return local;
  const width = Math.ceil(n / layout.worldSize);
  const padded = new Int32Array(width).fill(-1);
  padded.set(local);
  const gathered = tf.tidy(() => gatherConstantRows(tf.tensor1d(padded, 'int32'), { ...layout, localBatch: width }).dataSync() as Int32Array);
  const out = new Int32Array(n);
  for (let r = 0; r < layout.worldSize; r++) {
    const [start, end] = shardOf(n, { ...layout, rank: r });
    out.set(gathered.subarray(r * width, r * width + end - start), start);
  }
  return out;
}

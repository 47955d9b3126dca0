/**
 * The one seam between the losses and the process group: every part of a loss that needs
 * the global batch (N = W·B rows over W ranks) goes through {@link gatherRows} or
 * {@link sumOverRanks} (differentiable) or {@link gatherConstantRows}, {@link gatherIntsOverRanks}, {@link reduceOverRanks},
 * {@link reduceValuesOverRanks} or {@link sumValuesOverRanksExact} (no gradient), and the rank bookkeeping (offsets) through
 * {@link BatchLayout}.
 *
 * With W > 1 the two functions are the differentiable collectives of
 * `src/distributed/collectives.ts` (`allGather`, backward reduce-scatter SUM; `allReduceSum`,
 * backward all-reduce SUM); with no group or W = 1 they are the identity.
 *
 * Scales: see "Scale convention" in src/distributed/collectives.ts (the one place it is
 * written down). What each loss returns on rank r, so that `mean_r loss_r` is the global loss
 * as a function of every rank's inputs (the condition that convention needs):
 * - NT-Xent: the mean over its 2B local anchors (against all 2N gathered candidates);
 * - BYOL: the mean over its B local samples (no collective);
 * - Barlow Twins: the global loss itself (built from all-reduced sums; equal on every rank);
 * - VICReg: `simWeight` × MSE over its local rows + the global variance and covariance terms;
 * - MoCo v2+, MoCo v3, SimSiam, NNCLR, SupCon, ReSSL, DCL(W), SwAV, DINO, W-MSE: the mean over
 *   its local anchors;
 * - MAE: W × its share of the global masked-patch mean (Σ over its masked patches / the global
 *   count of masked patches);
 * - VIbCReg: as VICReg; All4One's feature term: the global loss itself.
 * - DeepCluster v2: W × its share of the global mean over rows with an assignment (as MAE).
 */
import { allGather, allReduceSum } from '../distributed/collectives.js';
import { jobWorldSize, scopedProcessGroup, type ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { tf } from '../core/tf.js';
import { meanCrossEntropy, rangeFrom } from './ops.js';

/**
 * The ranks a statistic is reduced over, with no assumption about how many rows each holds
 * (what {@link reduceOverRanks} and {@link reduceValuesOverRanks} need): Sinkhorn-Knopp over
 * the masked patches of the global batch, whose count differs from rank to rank, uses this
 * rather than a {@link BatchLayout}.
 */
export interface RankGroup {
  /** The group the collectives run on; undefined for one process. */
  readonly group: ProcessGroup | undefined;
  readonly rank: number;
  readonly worldSize: number;
}

/** Where this rank's rows sit in the global batch: every rank holds the same number B of rows per view. */
export interface BatchLayout extends RankGroup {
  /** B: rows per view on this rank (equal on every rank). */
  readonly localBatch: number;
  /** N = W·B: rows per view over all ranks. */
  readonly globalBatch: number;
  /** r·B: global index, within each view block, of this rank's local row 0. */
  readonly offset: number;
}

/**
 * The ranks of the group `explicit` if given, else of the one a method's training step scopes
 * (`withProcessGroup`), else one process; in a multi-rank job a coupled loss with neither is
 * refused rather than silently local. `fn` names the caller in messages. Each rank may hold
 * any number of rows (0 included): nothing here counts them.
 */
export function rankGroup(fn: string, explicit: ProcessGroup | undefined): RankGroup {
  const group = explicit ?? scopedProcessGroup();
  if (!group && jobWorldSize() > 1) {
    throw new Error(
      `${fn}: called without a process group in a ${jobWorldSize()}-rank job, so it would use this rank's batch only; ` +
        "compute it inside the method's embeddingLoss (the trainer's step scopes the group) or pass the group (a SingleProcessGroup for a local value)",
    );
  }
  const worldSize = group?.worldSize ?? 1;
  const rank = group?.rank ?? 0;
  if (!(Number.isInteger(worldSize) && worldSize >= 1 && Number.isInteger(rank) && rank >= 0 && rank < worldSize)) {
    throw new RangeError(`${fn}: invalid process group (rank ${rank} of world size ${worldSize})`);
  }
  return { group, rank, worldSize };
}

/**
 * The layout of a batch of `localBatch` rows per view on this rank (every rank must pass the
 * same B: the sampler makes per-rank batches equal; `globalBatch` and `offset` assume it).
 * `fn` names the caller in messages; the group is {@link rankGroup}'s (`withProcessGroup`, set
 * by BaseMethod around its coupled loss, if `explicit` is not given). Rows whose count differs
 * between ranks (masked patches) need only a {@link RankGroup}.
 */
export function batchLayout(fn: string, localBatch: number, explicit: ProcessGroup | undefined): BatchLayout {
  const ranks = rankGroup(fn, explicit);
  return {
    ...ranks,
    localBatch,
    globalBatch: ranks.worldSize * localBatch,
    offset: ranks.rank * localBatch,
  };
}

/**
 * Rows of every rank concatenated in rank order: `[B, D] -> [N, D]` (rows `r·B .. r·B+B−1`
 * come from rank r). Differentiable: the backward pass sums the incoming gradient over ranks
 * and keeps this rank's slice (`allGather`). World size 1: `x` itself.
 */
export function gatherRows(x: tf.Tensor2D, layout: BatchLayout): tf.Tensor2D {
  if (layout.worldSize === 1) return x;
  return allGather(x, layout.group) as tf.Tensor2D;
}

/**
 * Element-wise sum over ranks of a partial sum (any shape, same on every rank).
 * Differentiable: the backward pass all-reduces the incoming gradient with SUM
 * (`allReduceSum`). World size 1: `x` itself.
 */
export function sumOverRanks<T extends tf.Tensor>(x: T, layout: BatchLayout): T {
  if (layout.worldSize === 1) return x;
  return allReduceSum(x, layout.group) as T;
}

/**
 * `values` as a float32 tensor of `shape` that depends on `xs` with gradient exactly 0 (so that
 * autograd sees a path from each of them, as with {@link detach}, and no collective runs in
 * backward): a value computed from `xs` outside the graph, e.g. by a collective or in float64.
 */
export function constantFrom(xs: tf.Tensor[], values: Float32Array, shape: number[]): tf.Tensor {
  const op = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const inputs = args.slice(0, xs.length) as tf.Tensor[];
    return { value: tf.tensor(values, shape, 'float32'), gradFunc: () => inputs.map((x) => tf.zerosLike(x)) };
  });
  return op(...xs);
}

/**
 * Rows of every rank concatenated in rank order, WITHOUT gradient (solo-learn's
 * `concat_all_gather_no_grad`): `[B, D]` float32 -> `[N, D]`, or `[B]` int32 -> `[N]` (labels).
 * The result carries no gradient: backward gives `x` exact zeros and runs no collective (like
 * PyTorch's `x.detach()`), so only the forward pass is a collective, which every rank must call
 * the same number of times, in the same order. World size 1: `detach(x)`.
 *
 * int32 values travel as float32 (the process group moves float32 only), which is exact for
 * |value| ≤ 2^24 (labels, indices); larger ones are refused.
 */
export function gatherConstantRows<T extends tf.Tensor>(x: T, layout: BatchLayout): T {
  const is2dFloat = x.rank === 2 && x.dtype === 'float32';
  const is1dInt = x.rank === 1 && x.dtype === 'int32';
  if (!is2dFloat && !is1dInt) {
    throw new TypeError(`gatherConstantRows: expected a [B, D] float32 or [B] int32 tensor, got ${x.dtype} [${x.shape.join(', ')}]`);
  }
  if (layout.worldSize === 1) return detach(x);
  const group = layout.group!;
  const shape = [layout.worldSize * x.shape[0]!, ...x.shape.slice(1)];
  if (is2dFloat) {
    // dataSync() may alias the tensor's storage: allGather only reads it.
    const gathered = group.allGather(x.dataSync() as Float32Array);
    return constantFrom([x], gathered, shape) as T;
  }
  const ints = x.dataSync() as Int32Array;
  const asFloat = new Float32Array(ints.length);
  for (let i = 0; i < ints.length; i++) {
    if (Math.abs(ints[i]!) > 2 ** 24) throw new RangeError(`gatherConstantRows: int32 value ${ints[i]} is not exact in float32 (|value| > 2^24)`);
    asFloat[i] = ints[i]!;
  }
  const gathered = group.allGather(asFloat);
  return tf.tensor(Int32Array.from(gathered), shape, 'int32') as T;
}

/**
 * Host int32 values of every rank concatenated in rank order (`[B]` -> `[N]`; dataset
 * indices), for state written from host data. World size 1: a copy, nothing read from the
 * device. W > 1: {@link gatherConstantRows}'s collective (read synchronously).
 */
export function gatherIntsOverRanks(values: Int32Array, layout: BatchLayout): Int32Array {
  if (layout.worldSize === 1) return values.slice();
  return Int32Array.from(tf.tidy(() => gatherConstantRows(tf.tensor1d(values, 'int32'), layout).dataSync()));
}

/**
 * InfoNCE of this rank's rows against the whole global batch: logits `[B, N]` =
 * `anchors [B, D]` · `candidates [N, D]`ᵀ / τ, where `candidates` are gathered in rank order
 * (N = W·B) and local row i's positive is global column `layout.offset + i`. Returns the mean
 * cross-entropy over the B local rows, a scalar `[]`. Call it inside the caller's tidy.
 */
export function globalBatchInfoNce(anchors: tf.Tensor2D, candidates: tf.Tensor2D, temperature: number, layout: BatchLayout): tf.Scalar {
  const logits = tf.div(tf.matMul(anchors, candidates, false, true), temperature) as tf.Tensor2D;
  return meanCrossEntropy(logits, rangeFrom(layout.offset, layout.localBatch));
}

/**
 * Element-wise reduction over ranks of plain numbers WITHOUT gradient, for statistics of
 * data no gradient flows through (Sinkhorn-Knopp's sums, DINO's teacher centre, MAE's count
 * of masked patches): every rank gets the same result. The values travel as float32 (the
 * process group moves float32 only), so with W > 1 the result is rounded to float32 (relative
 * 6e-8). World size 1: a copy. Every rank must call it the same number of times, in the same
 * order, with arrays of the same length; how many rows each rank's values came from does not
 * matter (a {@link RankGroup} suffices).
 */
export function reduceValuesOverRanks(values: Float64Array, layout: RankGroup, op: 'sum' | 'max'): Float64Array {
  if (layout.worldSize === 1) return values.slice();
  const data = Float32Array.from(values);
  layout.group!.allReduce(data, op);
  return Float64Array.from(data);
}

/**
 * Element-wise reduction over ranks of a float32 tensor WITHOUT gradient (any shape, the same
 * on every rank), for statistics of data no gradient flows through (Sinkhorn-Knopp's sums,
 * DINO's teacher centre, MAE's count of masked patches). World size 1: `x` itself, left on the
 * device (no read, so a training step stays free of synchronous reads on the GPU engine).
 * W > 1: read synchronously and reduced through the group ({@link reduceValuesOverRanks},
 * float32 on the wire), then uploaded as a new tensor.
 */
export function reduceOverRanks<T extends tf.Tensor>(x: T, layout: RankGroup, op: 'sum' | 'max'): T {
  if (layout.worldSize === 1) return x;
  const reduced = reduceValuesOverRanks(Float64Array.from(x.dataSync()), layout, op);
  return tf.tensor(Float32Array.from(reduced), x.shape, 'float32') as T;
}

/**
 * Element-wise sum over ranks of float64 values WITHOUT gradient, in full float64 (k-means'
 * centroid sums and counts): each value travels as three float32 parts whose sum is the value
 * exactly (24 + 24 + 24 bits cover float64's 53), the parts of every rank are gathered, and
 * every rank adds the W contributions in rank order, so every rank gets the same float64 sums
 * whatever order Gloo would reduce in. World size 1: a copy. Every rank must call it the same
 * number of times, in the same order, with arrays of the same length.
 */
export function sumValuesOverRanksExact(values: Float64Array, layout: BatchLayout): Float64Array {
  if (layout.worldSize === 1) return values.slice();
  const n = values.length;
  const parts = new Float32Array(3 * n);
  for (let i = 0; i < n; i++) {
    const x = values[i]!;
    const hi = Math.fround(x);
    const mid = Math.fround(x - hi);
    parts[3 * i] = hi;
    parts[3 * i + 1] = mid;
    parts[3 * i + 2] = Math.fround(x - hi - mid);
  }
  const gathered = layout.group!.allGather(parts);
  const sums = new Float64Array(n);
  for (let r = 0; r < layout.worldSize; r++) {
    const base = 3 * n * r;
    for (let i = 0; i < n; i++) sums[i] = sums[i]! + (gathered[base + 3 * i]! + gathered[base + 3 * i + 1]! + gathered[base + 3 * i + 2]!);
  }
  return sums;
}

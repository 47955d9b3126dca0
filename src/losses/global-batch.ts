/**
 * The one seam between the losses and the process group: every part of a loss that needs
 * the global batch (N = W·B rows over W ranks) goes through {@link gatherRows} or
 * {@link sumOverRanks}, and the rank bookkeeping (offsets) through {@link BatchLayout}.
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
 * - VICReg: `simWeight` × MSE over its local rows + the global variance and covariance terms.
 */
import { allGather, allReduceSum } from '../distributed/collectives.js';
import { jobWorldSize, scopedProcessGroup, type ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { tf } from '../core/tf.js';

/** Where this rank's rows sit in the global batch. */
export interface BatchLayout {
  /** The group the collectives run on; undefined for one process. */
  readonly group: ProcessGroup | undefined;
  readonly rank: number;
  readonly worldSize: number;
  /** B: rows per view on this rank (equal on every rank). */
  readonly localBatch: number;
  /** N = W·B: rows per view over all ranks. */
  readonly globalBatch: number;
  /** r·B: global index, within each view block, of this rank's local row 0. */
  readonly offset: number;
}

/**
 * The layout of a batch of `localBatch` rows per view on this rank (every rank must pass the
 * same B: the sampler makes per-rank batches equal). `fn` names the caller in messages.
 * The group is `explicit` if given, else the one a method's training step scopes
 * (`withProcessGroup`, set by BaseMethod around its coupled loss), else one process; in a
 * multi-rank job a coupled loss with neither is refused rather than silently local.
 */
export function batchLayout(fn: string, localBatch: number, explicit: ProcessGroup | undefined): BatchLayout {
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
  return {
    group,
    rank,
    worldSize,
    localBatch,
    globalBatch: worldSize * localBatch,
    offset: rank * localBatch,
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
 * Rows of every rank concatenated in rank order, as constants (no gradient flows back):
 * `[B, D]` float32 or `[B]` int32 (exact for |values| < 2^24) `-> [N, D]` / `[N]`. One
 * all-gather; world size 1: `x` itself, detached.
 */
export function gatherConstantRows(x: tf.Tensor, layout: BatchLayout): tf.Tensor {
  if (layout.worldSize === 1 || !layout.group) return detach(x);
  const values = Float32Array.from(x.dataSync());
  const gathered = layout.group.allGather(values);
  const shape = [layout.worldSize * x.shape[0], ...x.shape.slice(1)];
  return x.dtype === 'int32' ? tf.tensor(Int32Array.from(gathered), shape, 'int32') : tf.tensor(gathered, shape, 'float32');
}

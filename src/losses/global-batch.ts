/**
 * The one seam between the losses and the process group: every part of a loss that needs
 * the global batch (N = W·B rows over W ranks) goes through {@link gatherRows} or
 * {@link sumOverRanks}, and the rank bookkeeping (offsets) through {@link BatchLayout}.
 *
 * DESIGN.md, "The distributed contract":
 * - contract 2 (gather only inside the loss): NT-Xent gathers its candidates with
 *   `gatherRows`; local row i's positive and self columns sit at `offset + i` per view block.
 * - contract 3 (scales): each rank's loss is the mean over its *local* anchors/samples (or,
 *   for batch-statistics losses, the global loss itself), so that `mean_r loss_r` is the
 *   global loss; with SUM-backward collectives every rank's gradient on its local rows is
 *   W × the global gradient, and DDP's gradient *averaging* divides the W back out.
 * - contract 4 (global statistics): Barlow Twins and VICReg build means, variances and
 *   cross-correlations from sums passed through `sumOverRanks` (differentiable all-reduce).
 *
 * Today only one process is implemented: with W = 1 both collectives are the identity, and
 * {@link batchLayout} throws {@link GatherNotImplementedError} for W > 1. Implementing the
 * distributed path means: make `batchLayout` accept W > 1 and route the two functions to
 * the differentiable collectives of `src/distributed` (allGather with reduce-scatter-SUM
 * backward; allReduce-SUM with allReduce-SUM backward). Nothing else in the losses changes.
 */
import type { ProcessGroup } from '../distributed/process-group.js';
import type { tf } from '../core/tf.js';

/** Thrown by a loss that needs the global batch when called with more than one process. */
export class GatherNotImplementedError extends Error {
  constructor(fn: string, worldSize: number) {
    super(`${fn}: world size ${worldSize}: gathering across processes is not implemented yet (only world size 1)`);
    this.name = 'GatherNotImplementedError';
  }
}

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
 * The layout of a batch of `localBatch` rows per view on this rank. `needsGlobalBatch`:
 * whether the caller will use {@link gatherRows}/{@link sumOverRanks} (those throw
 * {@link GatherNotImplementedError} for W > 1 until the distributed path exists); a loss
 * that is a mean of per-sample terms (BYOL) works unchanged for any W.
 */
export function batchLayout(
  fn: string,
  localBatch: number,
  group: ProcessGroup | undefined,
  needsGlobalBatch = true,
): BatchLayout {
  const worldSize = group?.worldSize ?? 1;
  const rank = group?.rank ?? 0;
  if (worldSize > 1 && needsGlobalBatch) throw new GatherNotImplementedError(fn, worldSize);
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
 * Rows of every rank concatenated in rank order: `[B, D] -> [N, D]` (differentiable: the
 * backward pass sums the incoming gradient over ranks and keeps this rank's slice).
 * World size 1: `x` itself.
 */
export function gatherRows(x: tf.Tensor2D, layout: BatchLayout): tf.Tensor2D {
  if (layout.worldSize === 1) return x;
  throw new GatherNotImplementedError('gatherRows', layout.worldSize);
}

/**
 * Element-wise sum over ranks of a partial sum (any shape; differentiable: the backward pass
 * all-reduces the incoming gradient with SUM). World size 1: `x` itself.
 */
export function sumOverRanks<T extends tf.Tensor>(x: T, layout: BatchLayout): T {
  if (layout.worldSize === 1) return x;
  throw new GatherNotImplementedError('sumOverRanks', layout.worldSize);
}

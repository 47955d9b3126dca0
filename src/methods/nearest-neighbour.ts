import { l2NormalizeRows } from '../core/ops.js';
import type { Rng } from '../core/random.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../core/tf.js';
import { defineArgs } from './args.js';
import { FeatureQueue } from './queue.js';

/**
 * The support set's size, shared by NNCLR, NNBYOL and NNSiam (solo-learn's `queue_size`,
 * 65536 in its recipes).
 */
export const supportSetArgs = defineArgs({
  queueSize: { kind: 'int', default: 65536, ge: 1, description: 'rows of the support set (the queue the nearest neighbours are taken from)' },
});

/**
 * The support set of the nearest-neighbour methods (Dwibedi et al. 2021): a {@link FeatureQueue}
 * of `size` L2-normalised projections `[size, dim]` with their labels (kept only to log the
 * neighbours' accuracy `nn_acc`, as solo-learn does).
 */
export function supportSet(size: number, dim: number, rng: Rng): FeatureQueue {
  return new FeatureQueue(size, dim, { labels: true, rng });
}

/** The nearest neighbours of the two views and the `nn_acc` term (see {@link nearestNeighbours}). */
export interface Neighbours {
  /** `[B, D]` the support-set row nearest to each row of view 1 (a constant). */
  nn1: Tensor2D;
  /** `[B, D]` the same for view 2. */
  nn2: Tensor2D;
  /** Fraction of this rank's samples whose view-1 neighbour has their label (solo-learn's `nn_acc`). */
  nnAcc: Scalar;
}

/**
 * solo-learn's `find_nn`, `nn_acc` and `dequeue_and_enqueue` of NNCLR/NNBYOL/NNSiam, in one
 * place; call it from the method's `embeddingLoss`. `z1`, `z2` `[B, D]` are the two views'
 * projections (any scale: they are L2-normalised here, as solo-learn normalises them);
 * `labels` `[B]`.
 *
 * - The neighbours are looked up in the queue as it was before this step (the rows pushed
 *   here are written after the optimizer step), by inner product of normalised rows
 *   ({@link FeatureQueue.nearest}); they are constants, so no gradient flows through them.
 * - The normalised `z1` and the labels are pushed; FeatureQueue gathers every rank's rows in
 *   rank order, so each rank's lookups run against the queue one process would hold on the
 *   global batch, not a per-rank queue of its own rows (raised in solo-learn issue #229, whose
 *   main point, NNCLR's loss against the local predictions only, nnclrLoss covers).
 * - `nn_acc` is the mean over this rank's samples (its mean over ranks is the global one).
 */
export function nearestNeighbours(queue: FeatureQueue, z1: Tensor, z2: Tensor, labels: Tensor): Neighbours {
  const q1 = l2NormalizeRows(z1 as Tensor2D);
  const q2 = l2NormalizeRows(z2 as Tensor2D);
  const first = queue.nearest(q1);
  const second = queue.nearest(q2);
  const nnAcc = tf.tidy(() => {
    const hits = tf.equal(tf.gather(queue.labels(), first.index), tf.cast(labels, 'int32'));
    return tf.mean(tf.cast(hits, 'float32')) as Scalar;
  });
  queue.push([q1], labels);
  tf.dispose([first.index, second.index]);
  return { nn1: first.rows, nn2: second.rows, nnAcc };
}

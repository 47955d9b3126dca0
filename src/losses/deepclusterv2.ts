/**
 * DeepCluster v2's loss (Caron et al. 2020; solo-learn's `deepclusterv2_loss_func`), over the
 * global batch.
 */
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, reduceOverRanks } from './global-batch.js';
import { checkPositive } from './ops.js';

export interface DeepClusterV2Options {
  /** Softmax temperature τ > 0 of the prototype scores (solo-learn: 0.1). */
  temperature: number;
}

/**
 * Cross-entropy of prototype scores against k-means assignments, averaged over the heads:
 * for head h, `scores[h]` `[V·B, K_h]` are the V views' scores of this rank's B samples (view
 * blocks of B rows, the same sample order in each) and `targets[h]` `[B]` int32 their
 * clusters, `-1` for a sample with none (not in the bank the clusters came from), which is
 * ignored (solo-learn's `ignore_index=-1`). Head h's term is the mean of
 * `−log softmax(s / τ)[target]` over every row with a cluster, over all ranks; with no such
 * row it is 0. Returns `[]`, computed on the device (the targets are never read back): NaN
 * when a target is below -1 or not a cluster of its head.
 *
 * Exact over W ranks: the count of rows with a cluster is summed over ranks (a constant, no
 * gradient, `reduceOverRanks`), and rank r returns W × (its rows' sum) / (global count), so
 * that the mean over ranks (DDP's gradient averaging) is the one-process loss. Per-rank means
 * (solo-learn under DDP) weigh the rows of a rank with fewer clustered samples more.
 */
export function deepClusterV2Loss(scores: tf.Tensor2D[], targets: tf.Tensor1D[], options: DeepClusterV2Options, group?: ProcessGroup): Scalar {
  checkPositive('temperature', options.temperature);
  if (scores.length === 0 || scores.length !== targets.length) {
    throw new Error(`deepClusterV2Loss: ${scores.length} score matrices for ${targets.length} target arrays (one of each per head, at least one)`);
  }
  const b = targets[0]!.shape[0];
  scores.forEach((s, h) => {
    const t = targets[h]!;
    if (s.rank !== 2 || t.rank !== 1 || t.dtype !== 'int32' || t.shape[0] !== b || b === 0 || s.shape[0] % b !== 0) {
      throw new Error(
        `deepClusterV2Loss: head ${h}: scores [${s.shape.join(', ')}] must be [V·B, K] for int32 targets [B] (B equal over heads, >= 1), got ${t.dtype} [${t.shape.join(', ')}]`,
      );
    }
  });
  const layout = batchLayout('deepClusterV2Loss', b, group);
  return tf.tidy(() => {
    const heads = scores.map((s, h) => {
      const [rows, k] = s.shape;
      const repeated = tf.tile(targets[h]!, [rows / b]); // [V·B]: each view block has the samples' targets
      const valid = tf.cast(tf.greaterEqual(repeated, 0), 'float32'); // [V·B]
      const inRange = tf.all(tf.logicalAnd(tf.greaterEqual(repeated, -1), tf.less(repeated, k)));
      const picked = tf.oneHot(tf.maximum(repeated, tf.scalar(0, 'int32')), k); // [V·B, K]
      const rowLoss = tf.neg(tf.sum(tf.mul(tf.logSoftmax(tf.div(s, options.temperature)), picked), 1)); // [V·B]
      return { sum: tf.sum(tf.mul(rowLoss, valid)), count: tf.sum(valid), inRange };
    });
    const counts = tf.unstack(reduceOverRanks(tf.stack(heads.map((x) => x.count)), layout, 'sum')); // H × []: one collective
    const terms = heads.map(({ sum, inRange }, h) => tf.where(inRange, tf.div(tf.mul(sum, layout.worldSize), tf.maximum(counts[h]!, 1)), tf.scalar(NaN)));
    return tf.div(tf.addN(terms), scores.length) as Scalar;
  });
}

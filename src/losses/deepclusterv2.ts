/**
 * DeepCluster v2's loss (Caron et al. 2020; solo-learn's `deepclusterv2_loss_func`), over the
 * global batch.
 */
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, reduceValuesOverRanks } from './global-batch.js';
import { checkPositive } from './ops.js';

export interface DeepClusterV2Options {
  /** Softmax temperature τ > 0 of the prototype scores (solo-learn: 0.1). */
  temperature: number;
}

/**
 * Cross-entropy of prototype scores against k-means assignments, averaged over the heads:
 * for head h, `scores[h]` `[V·B, K_h]` are the V views' scores of this rank's B samples (view
 * blocks of B rows, the same sample order in each) and `targets[h]` `[B]` their clusters,
 * `-1` for a sample with none (not in the bank the clusters came from), which is ignored
 * (solo-learn's `ignore_index=-1`). Head h's term is the mean of `−log softmax(s / τ)[target]`
 * over every row with a cluster, over all ranks; with no such row it is 0. Returns `[]`.
 *
 * Exact over W ranks: the count of rows with a cluster is summed over ranks (a constant, no
 * gradient), and rank r returns W × (its rows' sum) / (global count), so that the mean over
 * ranks (DDP's gradient averaging) is the one-process loss. Per-rank means (solo-learn under
 * DDP) weigh the rows of a rank with fewer clustered samples more.
 */
export function deepClusterV2Loss(scores: tf.Tensor2D[], targets: Int32Array[], options: DeepClusterV2Options, group?: ProcessGroup): Scalar {
  checkPositive('temperature', options.temperature);
  if (scores.length === 0 || scores.length !== targets.length) {
    throw new Error(`deepClusterV2Loss: ${scores.length} score matrices for ${targets.length} target arrays (one of each per head, at least one)`);
  }
  const b = targets[0]!.length;
  scores.forEach((s, h) => {
    const t = targets[h]!;
    if (s.rank !== 2 || t.length !== b || b === 0 || s.shape[0] % b !== 0) {
      throw new Error(
        `deepClusterV2Loss: head ${h}: scores [${s.shape.join(', ')}] must be [V·B, K] for targets of length B = ${t.length} (B equal over heads, >= 1)`,
      );
    }
    if (t.some((c) => c < -1 || c >= s.shape[1])) throw new RangeError(`deepClusterV2Loss: head ${h}: targets must be -1 or clusters in 0..${s.shape[1] - 1}`);
  });
  const layout = batchLayout('deepClusterV2Loss', b, group);
  const views = scores.map((s) => s.shape[0] / b);
  const localCounts = Float64Array.from(targets, (t, h) => t.reduce((n, c) => n + (c >= 0 ? 1 : 0), 0) * views[h]!);
  const counts = reduceValuesOverRanks(localCounts, layout, 'sum');
  return tf.tidy(() => {
    const terms = scores.map((s, h) => {
      const repeated = Int32Array.from({ length: s.shape[0] }, (_, i) => targets[h]![i % b]!);
      const valid = tf.tensor1d(Float32Array.from(repeated, (c) => (c >= 0 ? 1 : 0)));
      const picked = tf.oneHot(
        tf.tensor1d(
          Int32Array.from(repeated, (c) => Math.max(c, 0)),
          'int32',
        ),
        s.shape[1],
      );
      const logProbabilities = tf.logSoftmax(tf.div(s, options.temperature));
      const rowLoss = tf.neg(tf.sum(tf.mul(logProbabilities, picked), 1));
      const sum = tf.sum(tf.mul(rowLoss, valid));
      return tf.mul(sum, layout.worldSize / Math.max(counts[h]!, 1));
    });
    return tf.div(tf.addN(terms), scores.length) as Scalar;
  });
}

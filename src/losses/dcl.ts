/**
 * The decoupled contrastive loss, DCL and DCLW (Yeh et al. 2021; lightly's `DCLLoss` and
 * `DCLWLoss`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, gatherConstantRows, gatherRows, type BatchLayout } from './global-batch.js';
import { MASKED_LOGIT } from './nt-xent.js';
import { checkPair, checkPositive, l2NormalizeRows, oneHotMask, rangeFrom } from './ops.js';

export interface DclOptions {
  /** Softmax temperature τ > 0 (lightly's default: 0.1). */
  temperature: number;
  /**
   * σ > 0 of the negative von Mises-Fisher weights: given, the loss is DCLW (lightly's
   * default σ = 0.5); absent, DCL (every weight 1).
   */
  sigma?: number;
}

/**
 * DCL: NT-Xent with the positive pair removed from the denominator, symmetrised,
 * `0.5 · (ℓ(z1, z2) + ℓ(z2, z1))` with, for anchor i of view a (b the other view),
 *
 *     ℓ_i = −w_i · s(a_i, b_i)/τ + log Σ_{j ≠ i} [exp(s(a_i, a_j)/τ) + exp(s(a_i, b_j)/τ)]
 *
 * (one log-sum-exp over the 2N − 2 negatives, as lightly and Eq. 6 of the paper), s the cosine
 * similarity and j over all N rows of the global batch.
 *
 * - `z1`, `z2`: `[B, D]`, the two views' embeddings of the same B samples, L2-normalised here.
 * - DCL: w_i = 1. DCLW (`sigma` given): w_i = 2 − N · softmax_i(s(z1_i, z2_i) / σ) with the
 *   similarities detached and the softmax over the GLOBAL batch of N. lightly's `DCLWLoss`
 *   takes it over the local batch of B (and multiplies by B), so with W > 1 its weights, and
 *   its loss, depend on how the batch is split; here they do not (exact under data parallelism).
 * - Returns the mean over the 2B local anchors (B per view): a scalar `[]`. Needs N ≥ 2.
 *
 * `group` (W > 1): both views are gathered with the differentiable {@link gatherRows}
 * (backward sums over ranks, so each rank's gradient on its rows is W × the global loss's), and
 * DCLW's N positive similarities with {@link gatherConstantRows}; loss_r is the mean over rank
 * r's anchors, so mean_r loss_r is the global loss (scale convention:
 * src/distributed/collectives.ts). Two collectives forward and two backward; DCLW one more
 * forward.
 */
export function dclLoss(z1: tf.Tensor2D, z2: tf.Tensor2D, options: DclOptions, group?: ProcessGroup): Scalar {
  checkPair('dclLoss', ['z1', 'z2'], z1, z2);
  const { temperature, sigma } = options;
  checkPositive('temperature', temperature);
  if (sigma !== undefined) checkPositive('sigma', sigma);
  const layout = batchLayout('dclLoss', z1.shape[0], group);
  if (layout.globalBatch < 2) throw new Error('dclLoss: needs a global batch of at least 2 rows (an anchor needs negatives)');
  return tf.tidy(() => {
    const n1 = l2NormalizeRows(z1);
    const n2 = l2NormalizeRows(z2);
    const all1 = gatherRows(n1, layout); // [N, D]
    const all2 = gatherRows(n2, layout); // [N, D]
    const weights = sigma === undefined ? undefined : dclwWeights(n1, n2, sigma, layout); // [B]
    const own = oneHotMask(rangeFrom(layout.offset, layout.localBatch), layout.globalBatch); // [B, N]: column of row i's sample
    const side = (a: tf.Tensor2D, allA: tf.Tensor2D, allB: tf.Tensor2D): tf.Scalar => {
      const sAA = tf.div(tf.matMul(a, allA, false, true), temperature); // [B, N]
      const sAB = tf.div(tf.matMul(a, allB, false, true), temperature); // [B, N]
      let positive = tf.sum(tf.mul(sAB, tf.cast(own, 'float32')), 1); // [B]: s(a_i, b_i)/τ
      if (weights) positive = tf.mul(positive, weights);
      const masked = tf.fill(sAA.shape, MASKED_LOGIT);
      const negatives = tf.concat([tf.where(own, masked, sAA), tf.where(own, masked, sAB)], 1); // [B, 2N]
      return tf.mean(tf.sub(tf.logSumExp(negatives, 1), positive));
    };
    return tf.mul(0.5, tf.add(side(n1, all1, all2), side(n2, all2, all1))) as Scalar;
  });
}

/**
 * DCLW's weights of this rank's rows, `[B]`, without gradient: 2 − N·softmax(s/σ) over the N
 * positive similarities of the global batch (gathered: one collective).
 */
function dclwWeights(n1: tf.Tensor2D, n2: tf.Tensor2D, sigma: number, layout: BatchLayout): tf.Tensor1D {
  const local = tf.sum(tf.mul(n1, n2), 1, true) as tf.Tensor2D; // [B, 1]
  const all = tf.reshape(gatherConstantRows(local, layout), [layout.globalBatch]); // [N], no gradient
  const w = tf.sub(2, tf.mul(layout.globalBatch, tf.softmax(tf.div(all, sigma)))); // [N]
  return tf.slice(w, [layout.offset], [layout.localBatch]) as tf.Tensor1D;
}

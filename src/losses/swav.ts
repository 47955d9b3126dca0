/**
 * SwAV's swapped-prediction loss (Caron et al. 2020; solo-learn's `swav_loss_func`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout } from './global-batch.js';
import { checkPair, checkPositive } from './ops.js';

export interface SwavOptions {
  /** Softmax temperature τ > 0 of the predictions (solo-learn: 0.1). */
  temperature: number;
}

/**
 * SwAV: each crop's prototype scores predict the Sinkhorn assignments of every OTHER global
 * crop, `mean over pairs (g, v ≠ g) of −mean_i Σ_k Q_g[i, k] · log_softmax(P_v[i] / τ)_k`.
 *
 * - `preds`: V ≥ 2 tensors `[B, K]`, the prototype scores of every crop, the G global crops
 *   first (solo-learn's `out["p"]`).
 * - `assignments`: G tensors `[B, K]` (1 ≤ G ≤ V), the assignments of the global crops
 *   ({@link sinkhornKnopp} of `preds[g]`), constants (detached here).
 * - Returns the mean over the G·(V − 1) pairs of the mean over the B local rows: a scalar `[]`.
 *
 * `group`: the assignments already come from the global batch, so loss_r is the mean over
 * rank r's rows and mean_r loss_r is the global loss; no collective at any W (scale
 * convention: src/distributed/collectives.ts).
 */
export function swavLoss(preds: tf.Tensor2D[], assignments: tf.Tensor2D[], options: SwavOptions, group?: ProcessGroup): Scalar {
  if (!Array.isArray(preds) || preds.length < 2)
    throw new Error(`swavLoss: needs the predictions of at least 2 crops, got ${Array.isArray(preds) ? preds.length : typeof preds}`);
  if (!Array.isArray(assignments) || assignments.length < 1 || assignments.length > preds.length) {
    throw new Error(
      `swavLoss: needs 1 to ${preds.length} assignments (one per global crop), got ${Array.isArray(assignments) ? assignments.length : typeof assignments}`,
    );
  }
  preds.forEach((p, v) => checkPair('swavLoss', ['preds[0]', `preds[${v}]`], preds[0]!, p));
  assignments.forEach((a, g) => checkPair('swavLoss', ['preds[0]', `assignments[${g}]`], preds[0]!, a));
  checkPositive('temperature', options.temperature);
  batchLayout('swavLoss', preds[0]!.shape[0], group); // validates the group; no collective at any W
  return tf.tidy(() => {
    const logProbs = preds.map((p) => tf.logSoftmax(tf.div(p, options.temperature), 1)); // [B, K] each
    const terms: Scalar[] = [];
    assignments.forEach((a, g) => {
      const q = detach(a);
      logProbs.forEach((logP, v) => {
        if (v !== g) terms.push(tf.neg(tf.mean(tf.sum(tf.mul(q, logP), 1))) as Scalar);
      });
    });
    return tf.div(tf.addN(terms), terms.length) as Scalar;
  });
}

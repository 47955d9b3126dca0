/**
 * The MoCo v3 loss (Chen, Xie & He 2021; solo-learn's `mocov3_loss_func`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, gatherConstantRows, globalBatchInfoNce } from './global-batch.js';
import { checkPair, checkPositive, l2NormalizeRows } from './ops.js';

export interface Mocov3Options {
  /** Softmax temperature τ > 0 (solo-learn's default: 0.2). */
  temperature: number;
}

/**
 * MoCo v3: each query against the keys of the whole global batch, its own key the positive.
 *
 * - `query`: `[B, D]` online predictions of one view; `key`: `[B, D]` momentum projections of
 *   the other view. Both are L2-normalised here.
 * - Keys of all ranks are gathered WITHOUT gradient ({@link gatherConstantRows}): `[N, D]`
 *   (N = W·B); `key` gets an exactly zero gradient, as the momentum encoder's output does.
 * - logits `[B, N]` = q · Kᵀ / τ; the target of local row i is global column rank·B + i.
 * - Returns 2τ × the mean cross-entropy over the B local rows: a scalar `[]`.
 *
 * `group` (W > 1): loss_r is the mean over rank r's rows against all N keys, so
 * mean_r loss_r is the global loss; only `query` carries gradient, and only through
 * this rank's loss, so the local gradient is W × the global one's rows (scale convention:
 * src/distributed/collectives.ts). One collective (the key gather), none in backward.
 */
export function mocov3Loss(query: tf.Tensor2D, key: tf.Tensor2D, options: Mocov3Options, group?: ProcessGroup): Scalar {
  checkPair('mocov3Loss', ['query', 'key'], query, key);
  const { temperature } = options;
  checkPositive('temperature', temperature);
  const layout = batchLayout('mocov3Loss', query.shape[0], group);
  return tf.tidy(() => {
    const q = l2NormalizeRows(query);
    const keys = gatherConstantRows(l2NormalizeRows(key), layout); // [N, D], no gradient
    return tf.mul(globalBatchInfoNce(q, keys, temperature, layout), 2 * temperature) as Scalar;
  });
}

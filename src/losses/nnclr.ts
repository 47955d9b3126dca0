/**
 * The NNCLR loss (Dwibedi et al. 2021; solo-learn's `nnclr_loss_func`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout, gatherRows, globalBatchInfoNce } from './global-batch.js';
import { checkPair, checkPositive, l2NormalizeRows } from './ops.js';

export interface NnclrOptions {
  /** Softmax temperature τ > 0 (solo-learn's NNCLR recipes: 0.2). */
  temperature: number;
}

/**
 * NNCLR: the support-set nearest neighbour of each sample's view-1 embedding against the
 * predictions of view 2 of the whole global batch, its own prediction the positive.
 *
 * - `neighbours`: `[B, D]` nearest neighbours (from the support set), constants: *detached*
 *   (gradient exactly 0). `predictions`: `[B, D]` predictions of the other view. Both are
 *   L2-normalised here.
 * - Predictions of all ranks are gathered with the differentiable {@link gatherRows}: `[N, D]`.
 * - logits `[B, N]` = nn · Pᵀ / τ; the target of local row i is global column rank·B + i.
 * - Returns the mean cross-entropy over the B local rows: a scalar `[]`.
 *
 * `group` (W > 1): loss_r is the mean over rank r's rows, so mean_r loss_r is the global loss;
 * the gather's backward sums every rank's gradient into this rank's predictions, so the local
 * gradient is W × the global one's rows (scale convention: src/distributed/collectives.ts).
 * One collective forward, one backward.
 */
export function nnclrLoss(neighbours: tf.Tensor2D, predictions: tf.Tensor2D, options: NnclrOptions, group?: ProcessGroup): Scalar {
  checkPair('nnclrLoss', ['neighbours', 'predictions'], neighbours, predictions);
  const { temperature } = options;
  checkPositive('temperature', temperature);
  const layout = batchLayout('nnclrLoss', neighbours.shape[0], group);
  return tf.tidy(() => {
    const nn = l2NormalizeRows(detach(neighbours));
    const all = gatherRows(l2NormalizeRows(predictions), layout); // [N, D]
    return globalBatchInfoNce(nn, all, temperature, layout);
  });
}

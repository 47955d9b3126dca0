/**
 * The SimSiam loss (Chen & He 2021; solo-learn's `simsiam_loss_func`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout } from './global-batch.js';
import { checkPair, rowCosine } from './ops.js';

/**
 * Negative cosine similarity: `−mean_i cos(p_i, z_i)` with `z` detached.
 *
 * - `p`: `[B, D]` predictions of one view; `z`: `[B, D]` projections of the other view,
 *   *detached* (gradient exactly 0, PyTorch's `z.detach()`).
 * - Returns a scalar `[]` in [−1, 1]. SimSiam symmetrises by calling it twice:
 *   `(negativeCosineLoss(p1, z2) + negativeCosineLoss(p2, z1)) / 2`.
 *
 * `group`: no global batch is needed: loss_r is the mean over rank r's B rows and the mean over
 * ranks of those is the global mean; no collective runs at any W (scale convention:
 * src/distributed/collectives.ts).
 */
export function negativeCosineLoss(p: tf.Tensor2D, z: tf.Tensor2D, group?: ProcessGroup): Scalar {
  checkPair('negativeCosineLoss', ['p', 'z'], p, z);
  batchLayout('negativeCosineLoss', p.shape[0], group); // validates the group; no collective at any W
  return tf.tidy(() => tf.neg(tf.mean(rowCosine(p, detach(z)))) as Scalar);
}

/**
 * The BYOL loss (Grill et al. 2020; solo-learn's `byol_loss_func`, symmetrised).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout } from './global-batch.js';
import { detach } from '../core/ops.js';
import { checkPair, rowCosine } from './ops.js';

/**
 * BYOL: the mean over samples of `(2 − 2cos(p1_i, z2_i)) + (2 − 2cos(p2_i, z1_i))`.
 *
 * - `p1`, `p2`: `[B, D]` online predictions of views 1 and 2.
 * - `z1`, `z2`: `[B, D]` target projections of views 1 and 2, *detached*: they pass through
 *   {@link detach} (a `tf.customGrad` identity whose gradient is `zerosLike`), so the
 *   gradient with respect to `z1`, `z2` is exactly 0, as with PyTorch's `z.detach()`.
 * - Returns a scalar `[]` in [0, 8].
 *
 * `group`: BYOL needs no global batch: each rank's loss is the mean over its B local samples,
 * and the mean over ranks of those is the global mean (equal B per rank), so any world size
 * is already correct (scale convention: src/distributed/collectives.ts); no collective runs.
 */
export function byolLoss(p1: tf.Tensor2D, p2: tf.Tensor2D, z1: tf.Tensor2D, z2: tf.Tensor2D, group?: ProcessGroup): Scalar {
  checkPair('byolLoss', ['p1', 'p2'], p1, p2);
  checkPair('byolLoss', ['z1', 'z2'], z1, z2);
  checkPair('byolLoss', ['p1', 'z1'], p1, z1);
  batchLayout('byolLoss', p1.shape[0], group); // validates the group; no collective at any W
  return tf.tidy(() => {
    const cos1 = rowCosine(p1, detach(z2)); // [B]
    const cos2 = rowCosine(p2, detach(z1)); // [B]
    const perSample = tf.sub(4, tf.mul(2, tf.add(cos1, cos2))); // [B]
    return tf.mean(perSample) as Scalar;
  });
}

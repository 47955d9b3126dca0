/**
 * The KoLeo regulariser (Sablayrolles et al. 2019, "Spreading vectors for similarity search";
 * DINOv2's `KoLeoLoss`, facebookresearch/dinov2 `dinov2/loss/koleo_loss.py`, lightly's
 * `KoLeoLoss`): the Kozachenko-Leonenko differential entropy estimator of the L2-normalised
 * features, pushing each one away from its nearest neighbour.
 */
import { withoutGradientTape } from '../core/layers.js';
import { l2NormalizeRows } from '../core/ops.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, gatherRows } from './global-batch.js';
import { checkPositive } from './ops.js';

/** DINOv2's ε: of the normalisation, the pairwise distance and the logarithm. */
export const KOLEO_EPS = 1e-8;

/**
 * KoLeo: `−mean_i log(‖z_i − z_{n(i)} + ε‖ + ε)`, z the rows of `x` `[B, D]` divided by
 * `max(‖x_i‖, ε)` and n(i) the row of largest cosine with z_i among the OTHER rows of the
 * global batch (DINOv2's `pairwise_NNs_inner`: self-similarity set to −1, first maximum); the
 * `+ ε` inside the norm is PyTorch's `PairwiseDistance(eps=1e-8)`. Returns the scalar `[]`
 * (the mean over this rank's rows).
 *
 * `group` (W ranks): the neighbours are searched over the global batch: the normalised rows
 * of every rank are gathered with the differentiable all-gather (one all-gather forward, its
 * reduce-scatter backward), so a neighbour on another rank receives its share of the gradient
 * there, and mean_r loss_r is the one-process loss on the N = W·B rows. DINOv2 computes it per
 * GPU (the nearest neighbour among the GPU's own B rows), which is another objective: the
 * distances to the nearest of B rows rather than of N.
 */
export function koleoLoss(x: tf.Tensor2D, options: { eps?: number } = {}, group?: ProcessGroup): Scalar {
  if (!(x instanceof tf.Tensor) || x.rank !== 2) throw new Error(`koleoLoss: x must be [B, D], got ${x instanceof tf.Tensor ? `[${x.shape}]` : typeof x}`);
  const eps = options.eps ?? KOLEO_EPS;
  checkPositive('eps', eps);
  const b = x.shape[0];
  const layout = batchLayout('koleoLoss', b, group);
  if (layout.globalBatch < 2) throw new Error(`koleoLoss: needs at least 2 rows in the global batch, got ${layout.globalBatch}`);
  return tf.tidy(() => {
    const z = l2NormalizeRows(x, eps); // [B, D]
    const all = gatherRows(z, layout); // [N, D]
    // The arg max of the cosines with the own row replaced by −1 (DINOv2's diagonal fill): a choice, off the tape.
    const nearest = withoutGradientTape(() =>
      tf.tidy(() => {
        const self = tf.cast(tf.oneHot(tf.range(layout.offset, layout.offset + b, 1, 'int32'), layout.globalBatch), 'bool'); // [B, N]
        return tf.argMax(tf.where(self, tf.fill([b, layout.globalBatch], -1), tf.matMul(z, all, false, true)), 1);
      }),
    );
    const neighbours = tf.gather(all, nearest); // [B, D], with the gradient of the gathered rows
    const distances = tf.sqrt(tf.sum(tf.square(tf.add(tf.sub(z, neighbours), eps)), 1)); // [B]
    return tf.neg(tf.mean(tf.log(tf.add(distances, eps)))) as Scalar;
  });
}

/**
 * The FastSiam loss (Pototzky et al. 2022; lightly's `benchmarks/cifar10_benchmark.py`,
 * `FastSiamModel.training_step`).
 */
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout } from './global-batch.js';
import { checkPair, rowCosine } from './ops.js';

/**
 * SimSiam with several views averaged as the target: for each view i, the negative cosine
 * similarity of its prediction with the mean of the other views' *detached* projections,
 * averaged over the V views:
 * `(1/V) Σ_i −mean_b cos(p_i[b], mean_{j≠i} z_j[b])`.
 *
 * - `predictions`: V ≥ 2 tensors `[B, D]` (the predictor's outputs, one per view);
 * - `projections`: V tensors `[B, D]` (the projector's outputs), detached here (gradient
 *   exactly 0, lightly's `z.detach()`).
 * - Returns a scalar `[]` in [−1, 1].
 *
 * `group`: no global batch is needed: the targets mix the views of one sample only, so loss_r
 * is the mean over rank r's B rows and the mean over ranks is the global mean; no collective
 * runs at any W (scale convention: src/distributed/collectives.ts).
 */
export function fastSiamLoss(predictions: tf.Tensor2D[], projections: tf.Tensor2D[], group?: ProcessGroup): Scalar {
  const views = predictions.length;
  if (views < 2 || projections.length !== views) {
    throw new Error(`fastSiamLoss: needs V >= 2 predictions and as many projections, got ${views} and ${projections.length}`);
  }
  predictions.forEach((p, i) => checkPair('fastSiamLoss', [`predictions[${i}]`, `projections[${i}]`], p, projections[i]!));
  batchLayout('fastSiamLoss', predictions[0]!.shape[0], group); // validates the group; no collective at any W
  return tf.tidy(() => {
    const z = projections.map((zi) => detach(zi));
    const terms = predictions.map((p, i) => {
      const target = tf.div(tf.addN(z.filter((_, j) => j !== i)), views - 1) as tf.Tensor2D;
      return tf.neg(tf.mean(rowCosine(p, target)));
    });
    return tf.div(tf.addN(terms), views) as Scalar;
  });
}

/**
 * I-JEPA's prediction loss (Assran et al. 2023; facebookresearch/ijepa `src/train.py`:
 * `h = F.layer_norm(target_encoder(imgs), (D,))`, `loss = F.smooth_l1_loss(z, h)`), with the
 * exact mean over the target patches of every rank.
 */
import { invalidValue } from '../core/errors.js';
import { detach } from '../core/ops.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, reduceOverRanks } from './global-batch.js';

/** The element-wise distance between predicted and target embeddings. */
export type IjepaDistance = 'smooth_l1' | 'mse';

export interface IjepaLossOptions {
  /** `smooth_l1` (the reference's, default) or `mse`. */
  distance?: IjepaDistance;
  /** Smooth-L1's `beta` (PyTorch's default 1, the reference's): quadratic below it, linear above. */
  beta?: number;
}

/** The targets' LayerNorm epsilon (`F.layer_norm`'s default), without affine parameters. */
export const IJEPA_TARGET_LAYER_NORM_EPS = 1e-5;

/**
 * I-JEPA: the predicted embedding of every target patch against the target encoder's
 * embedding of that patch, LayerNorm'ed over its D features (no affine parameters, eps 1e-5)
 * and detached; smooth-L1 (beta) or squared error per feature, averaged over the D features
 * and the target patches of the GLOBAL batch.
 *
 * - `predictions`: `[M, D]` the predictor's outputs, one row per target patch on this rank
 *   (every target block of every sample, in any order, row m matching `targets` row m).
 * - `targets`: `[M, D]` the target encoder's patch tokens at the same patches (before the
 *   LayerNorm; constants).
 *
 * `group` (W ranks): M may differ between ranks (the samples' target blocks differ in size):
 * the count M is all-reduced (`reduceOverRanks`, one collective, none in backward) and rank r
 * returns W · (its sum) / (D · the global count), so mean_r loss_r is the mean over every target
 * patch of the global batch (the reference takes each rank's mean, then their mean: the same only
 * when every rank has as many target patches, which its per-batch block shape makes so).
 * Returns a scalar `[]`.
 */
export function ijepaLoss(predictions: tf.Tensor2D, targets: tf.Tensor2D, options: IjepaLossOptions = {}, group?: ProcessGroup): Scalar {
  const distance = options.distance ?? 'smooth_l1';
  const beta = options.beta ?? 1;
  if (distance !== 'smooth_l1' && distance !== 'mse') throw invalidValue('distance', distance, 'smooth_l1 or mse');
  if (!(beta > 0)) throw invalidValue('beta', beta, 'a number > 0');
  if (predictions.rank !== 2 || targets.rank !== 2 || predictions.shape.some((n, i) => n !== targets.shape[i])) {
    throw new Error(`ijepaLoss: predictions and targets must be [M, D] of the same shape, got [${predictions.shape}] and [${targets.shape}]`);
  }
  const [m, d] = predictions.shape;
  const layout = batchLayout('ijepaLoss', m, group);
  return tf.tidy(() => {
    const t = detach(targets);
    const { mean, variance } = tf.moments(t, 1, true);
    const normalised = tf.div(tf.sub(t, mean), tf.sqrt(tf.add(variance, IJEPA_TARGET_LAYER_NORM_EPS)));
    const diff = tf.sub(predictions, normalised);
    let perElement: tf.Tensor;
    if (distance === 'mse') {
      perElement = tf.square(diff);
    } else {
      // 0.5 x² / beta below beta, |x| − 0.5 beta above: 0.5 min(|x|, beta)² / beta + |x| − min(|x|, beta).
      const abs = tf.abs(diff);
      const inner = tf.minimum(abs, beta);
      perElement = tf.add(tf.div(tf.mul(tf.square(inner), 0.5), beta), tf.sub(abs, inner));
    }
    const count = reduceOverRanks(tf.scalar(m), layout, 'sum');
    return tf.div(tf.mul(tf.sum(perElement), layout.worldSize / d), count) as Scalar;
  });
}

/**
 * The masked-autoencoder reconstruction loss (He et al. 2022; solo-learn's `mae_loss_func`
 * and `patchify`), with the exact global mean over the masked patches of every rank.
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { detach } from '../core/ops.js';
import { batchLayout, reduceOverRanks } from './global-batch.js';

export interface MaeOptions {
  /** Side P of the square patches, in pixels (an integer ≥ 1 dividing the image's height and width). */
  patchSize: number;
  /** Normalise each target patch by its own mean and standard deviation (MAE's `norm_pix_loss`); default true. */
  normPixLoss?: boolean;
}

/** Added to each patch's variance before the square root (MAE's and solo-learn's 1e-6). */
export const MAE_NORM_PIX_EPS = 1e-6;

/**
 * Images cut into non-overlapping P × P patches: `[B, H, W, C] -> [B, L, P·P·C]` with
 * L = (H/P)·(W/P), patches in row-major order and each patch's pixels in (row, column,
 * channel) order: MAE's `patchify` (`nchpwq -> nhwpqc`) for NHWC images.
 */
export function patchify(images: tf.Tensor4D, patchSize: number): tf.Tensor3D {
  if (images.rank !== 4) throw new Error(`patchify: images must be [B, H, W, C], got shape [${images.shape.join(', ')}]`);
  const [b, h, w, c] = images.shape;
  if (!(Number.isInteger(patchSize) && patchSize >= 1 && h % patchSize === 0 && w % patchSize === 0)) {
    throw invalidValue('patchSize', patchSize, `an integer >= 1 dividing the image height ${h} and width ${w}`);
  }
  const rows = h / patchSize;
  const cols = w / patchSize;
  return tf.tidy(() => {
    const split = tf.reshape(images, [b, rows, patchSize, cols, patchSize, c]);
    return tf.reshape(tf.transpose(split, [0, 1, 3, 2, 4, 5]), [b, rows * cols, patchSize * patchSize * c]);
  });
}

/**
 * MAE: the squared error between the predicted and the true (optionally normalised) pixels,
 * averaged over each patch's P·P·C values, then over the MASKED patches of the global batch
 * only: `Σ_{i,l} m_il · mean_d (pred_ild − target_ild)² / Σ_{i,l} m_il`.
 *
 * - `images`: `[B, H, W, C]` the original images, constants (detached here: the targets).
 * - `predictions`: `[B, L, P·P·C]` the decoder's pixels of every patch, in {@link patchify}'s order.
 * - `mask`: `[B, L]`, 1 where the patch was masked (hidden from the encoder), 0 where it was
 *   seen; any dtype, values 0 or 1 only.
 * - `normPixLoss`: target = (patch − mean) / sqrt(var + 1e-6), mean and (unbiased) variance
 *   over the patch's P·P·C values.
 *
 * `group` (W ranks): the number of masked patches is all-reduced (`reduceOverRanks`, one
 * collective, none in backward) and rank r returns W · (Σ over its masked patches) / (the
 * global count), so mean_r loss_r is the global mean even when the ranks mask different
 * numbers of patches (a per-rank mean, solo-learn's under DDP, weights each rank's patches
 * by 1 / its own count instead). Returns a scalar `[]`, computed on the device (the mask is
 * never read back): NaN when a mask value is neither 0 nor 1 or when the global batch has no
 * masked patch.
 */
export function maeLoss(images: tf.Tensor4D, predictions: tf.Tensor3D, mask: tf.Tensor2D, options: MaeOptions, group?: ProcessGroup): Scalar {
  const { patchSize } = options;
  const normPixLoss = options.normPixLoss ?? true;
  if (images.dtype !== 'float32') throw new Error(`maeLoss: images must be float32, got ${images.dtype}`);
  const b = images.shape[0];
  const targetShape = tf.tidy(() => patchify(images, patchSize).shape); // validates images and patchSize
  if (predictions.rank !== 3 || predictions.dtype !== 'float32' || predictions.shape.some((n, i) => n !== targetShape[i])) {
    throw new Error(
      `maeLoss: predictions must be float32 [${targetShape.join(', ')}] (B, patches, P·P·C), got ${predictions.dtype} [${predictions.shape.join(', ')}]`,
    );
  }
  if (mask.rank !== 2 || mask.shape[0] !== b || mask.shape[1] !== targetShape[1]) {
    throw new Error(`maeLoss: mask must be [${b}, ${targetShape[1]}] (B, patches), got [${mask.shape.join(', ')}]`);
  }
  if (normPixLoss && targetShape[2] < 2) throw invalidValue('patchSize', patchSize, 'patches of at least 2 values (P·P·C >= 2) for normPixLoss');
  const layout = batchLayout('maeLoss', b, group);
  return tf.tidy(() => {
    let target = patchify(detach(images), patchSize); // [B, L, P·P·C]
    if (normPixLoss) {
      const d = target.shape[2];
      const mean = tf.mean(target, 2, true);
      const variance = tf.div(tf.sum(tf.square(tf.sub(target, mean)), 2, true), d - 1); // unbiased, as torch.var
      target = tf.div(tf.sub(target, mean), tf.sqrt(tf.add(variance, MAE_NORM_PIX_EPS)));
    }
    const perPatch = tf.mean(tf.squaredDifference(predictions, target), 2); // [B, L]
    const m = tf.cast(mask, 'float32'); // [B, L]
    const count = reduceOverRanks(tf.sum(m), layout, 'sum'); // [] global count of masked patches
    const binary = tf.all(tf.logicalOr(tf.equal(m, 0), tf.equal(m, 1)));
    const loss = tf.div(tf.mul(tf.sum(tf.mul(perPatch, m)), layout.worldSize), count);
    return tf.where(tf.logicalAnd(binary, tf.greater(count, 0)), loss, tf.scalar(NaN)) as Scalar;
  });
}

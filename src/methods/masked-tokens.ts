/**
 * The masked-image-modelling pieces iBOT and DINOv2 share: their block-mask arguments, the
 * student ViT's pass over block-masked global crops with a mask token, and the token slices
 * and head passes of the patch tokens.
 */
import type { VisionTransformer } from '../backbones/vit.js';
import { invalidValue } from '../core/errors.js';
import { tf, type Tensor, type Tensor2D } from '../core/tf.js';
import { maskedRows } from '../losses/ibot.js';
import type { SampleKeys } from './base.js';
import { blockMasks, type BlockMaskOptions } from './block-masking.js';
import type { DinoHead } from './heads.js';

/** The block-mask arguments (iBOT's `pred_ratio 0 0.3 --pred_ratio_var 0 0.2`, DINOv2's `mask_ratio_min_max [0.1, 0.5]`, probability 0.5). */
export const BLOCK_MASK_ARGS = {
  maskRatio: { kind: 'float', default: 0.3, ge: 0, le: 1, description: 'mean fraction of the patches block-masked in a masked image' },
  maskRatioVariation: { kind: 'float', default: 0.2, ge: 0, le: 1, description: 'the fraction is uniform in maskRatio +- this' },
  maskProbability: { kind: 'float', default: 0.5, ge: 0, le: 1, description: 'probability that a global crop is masked at all' },
} as const;

/** Refuses a `maskRatio ± maskRatioVariation` outside [0, 1] (a user error naming the argument). */
export function checkMaskRatio(maskRatio: number, maskRatioVariation: number): void {
  if (maskRatio - maskRatioVariation < 0 || maskRatio + maskRatioVariation > 1) {
    throw invalidValue(
      'method_args.mask_ratio_variation',
      maskRatioVariation,
      `at most min(maskRatio, 1 - maskRatio) = ${Number(Math.min(maskRatio, 1 - maskRatio).toPrecision(12))}`,
    );
  }
}

/** The student's pass over the block-masked global crops. */
export interface MaskedCrops {
  /** Per global crop: `[B·L]` host masks (1: masked), keyed per sample by (seed, epoch, index, crop). */
  masks: Float32Array[];
  /** Per global crop: `[B, 1 + L, D]`, the ViT's output tokens with the masked patches' embeddings replaced by the mask token. */
  tokens: Tensor[];
}

/**
 * Block-masks each global crop `g` ({@link blockMasks}, view key g) and runs the student ViT
 * on it with `maskToken` in place of the masked patch embeddings
 * ({@link VisionTransformer.encodeTokens}).
 */
export function encodeMaskedCrops(
  vit: VisionTransformer,
  globalViews: Tensor[],
  samples: SampleKeys,
  masking: BlockMaskOptions,
  maskToken: Tensor,
): MaskedCrops {
  const p = vit.config.patchSize;
  const masks: Float32Array[] = [];
  const tokens = globalViews.map((view, g) => {
    const [gh, gw] = [Math.floor(view.shape[1]! / p), Math.floor(view.shape[2]! / p)];
    masks.push(blockMasks(samples, gh, gw, masking, g)); // [B·L], on the host
    return vit.encodeTokens(view, tf.tensor2d(masks[g]!, [view.shape[0]!, gh * gw]), maskToken); // [B, 1 + L, D]
  });
  return { masks, tokens };
}

/**
 * `[B, 1 + L, D] -> [M, K]`: `head` on the masked patch tokens only (in {@link maskedRows}
 * order; the others do not enter the losses), `[0, K]` when none is masked.
 */
export function headOfMaskedPatches(head: DinoHead, tokens: Tensor, mask: ArrayLike<number>, outputDim: number): Tensor2D {
  const [b, t, d] = tokens.shape;
  const { rows } = maskedRows(mask, t! - 1);
  if (rows.length === 0) return tf.zeros([0, outputDim]) as Tensor2D;
  return head.forward(tf.gather(tf.reshape(patchTokens(tokens), [b! * (t! - 1), d!]), tf.tensor1d(rows, 'int32'))) as Tensor2D;
}

/** `[B, T, D] -> [B, T, K]`: the head on every token (one pass over the `B·T` rows). */
export function headOfTokens(head: DinoHead, tokens: Tensor): tf.Tensor3D {
  const [b, t, d] = tokens.shape;
  const out = head.forward(tf.reshape(tokens, [b! * t!, d!]));
  return tf.reshape(out, [b!, t!, out.shape[1]!]) as tf.Tensor3D;
}

/** `[B, T, C] -> [B, C]`: token 0 (the `[CLS]` token). */
export function clsToken(tokens: Tensor): Tensor2D {
  const [b, , c] = tokens.shape;
  return tf.reshape(tf.slice(tokens, [0, 0, 0], [b!, 1, c!]), [b!, c!]) as Tensor2D;
}

/** `[B, T, C] -> [B, T − 1, C]`: the patch tokens. */
export function patchTokens(tokens: Tensor): tf.Tensor3D {
  const [b, t, c] = tokens.shape;
  return tf.slice(tokens, [0, 1, 0], [b!, t! - 1, c!]) as tf.Tensor3D;
}

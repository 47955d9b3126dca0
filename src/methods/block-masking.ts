/**
 * iBOT's block masking of patch tokens (bytedance/ibot `ImageFolderMask`, `pred_shape='block'`,
 * after BEiT's `MaskingGenerator`), drawn per sample from `Rng.keyed(seed, epoch, index, view,
 * MASK_STREAM)` as MAE's masks ({@link randomMasks}), so a sample's mask depends on nothing
 * else: not on its batch, its position in the batch or the world size (docs/design.md,
 * contract 8).
 */
import { Rng } from '../core/random.js';
import type { SampleKeys } from './base.js';
import { MASK_STREAM } from './mae-masking.js';

/** How many patches of each image are masked (iBOT's `pred_ratio`, `pred_ratio_var`, `random.choice`). */
export interface BlockMaskOptions {
  /** Mean fraction r of the patches masked in a masked image (iBOT ViT-S: 0.3). */
  ratio: number;
  /** The fraction is uniform in [r − v, r + v] (iBOT ViT-S: 0.2; 0: exactly r). */
  ratioVariation: number;
  /** Probability that an image is masked at all (iBOT's `pred_ratio [0, r]`: one of the two, 0.5; 1: every image). */
  maskProbability: number;
}

/** BEiT's aspect ratios of a block: log-uniform in [0.3, 1 / 0.3]. */
const LOG_ASPECT = [Math.log(0.3), Math.log(1 / 0.3)] as const;

/**
 * One `h × w` block mask with at least `ratio · h · w` patches masked where blocks allow it
 * (BEiT's `MaskingGenerator` as iBOT writes it): blocks of area uniform in [(min(h, w) // 3)²,
 * what is left] and log-uniform aspect ratio are placed uniformly, each adding only its new
 * patches, up to 10 tries per block, until the target is reached or a block adds none.
 * Returns `[h·w]`, 1 where the patch is masked.
 */
export function blockMask(rng: Rng, h: number, w: number, ratio: number): Float32Array {
  const mask = new Float32Array(h * w);
  const target = ratio * h * w;
  const low = Math.floor(Math.min(h, w) / 3) ** 2;
  let count = 0;
  while (count < target) {
    const maxPatches = target - count;
    let delta = 0;
    for (let attempt = 0; attempt < 10 && delta === 0; attempt++) {
      const area = rng.uniformIn(low, maxPatches);
      const aspect = Math.exp(rng.uniformIn(LOG_ASPECT[0], LOG_ASPECT[1]));
      const bh = Math.round(Math.sqrt(area * aspect));
      const bw = Math.round(Math.sqrt(area / aspect));
      if (bw >= w || bh >= h) continue;
      const top = rng.int(h - bh + 1);
      const left = rng.int(w - bw + 1);
      let masked = 0;
      for (let i = top; i < top + bh; i++) for (let j = left; j < left + bw; j++) masked += mask[i * w + j]!;
      const added = bh * bw - masked;
      if (added > 0 && added <= maxPatches) {
        for (let i = top; i < top + bh; i++) for (let j = left; j < left + bw; j++) mask[i * w + j] = 1;
        delta = added;
      }
    }
    if (delta === 0) break;
    count += delta;
  }
  return mask;
}

/**
 * The block masks of `samples` (view `view`) for images of `h × w` patches: `[B·h·w]`, sample by
 * sample, 1 where the patch is masked. Each image is masked with probability
 * `maskProbability`, with a fraction uniform in `ratio ± ratioVariation`, all drawn from its key.
 */
export function blockMasks(samples: SampleKeys, h: number, w: number, options: BlockMaskOptions, view: number): Float32Array {
  const { ratio, ratioVariation, maskProbability } = options;
  const b = samples.indices.length;
  const out = new Float32Array(b * h * w);
  for (let s = 0; s < b; s++) {
    const rng = Rng.keyed(samples.seed, samples.epoch, samples.indices[s]!, view, MASK_STREAM);
    const masked = rng.uniform() < maskProbability;
    const fraction = ratioVariation > 0 ? rng.uniformIn(ratio - ratioVariation, ratio + ratioVariation) : ratio;
    if (masked) out.set(blockMask(rng, h, w, fraction), s * h * w);
  }
  return out;
}

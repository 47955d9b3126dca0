/**
 * MAE's random masking (solo-learn's `random_masking`: per sample, the patches with the
 * smallest noise are kept), drawn per sample from `Rng.keyed(seed, epoch, index, view,
 * MASK_STREAM)`, so a sample's mask depends on nothing else: not on its batch, its
 * position in the batch or the world size (docs/design.md, contract 8).
 */
import { Rng } from '../core/random.js';
import type { SampleKeys } from './base.js';

/** The last key component of the masks' generators (the views' keys have one fewer). */
export const MASK_STREAM = 0x6d61736b;

/** The masks of a batch of B samples with L patches each, K of them kept. */
export interface PatchMasks {
  /** Patches kept per sample: `floor(L · (1 − maskRatio))`, as solo-learn. */
  keptPerSample: number;
  /** `[B·K]` the kept patch indices, sample by sample, in the order the encoder sees them. */
  keep: Int32Array;
  /** `[B·L]` 1 where the patch is masked (hidden from the encoder), 0 where it is kept. */
  mask: Float32Array;
  /** `[B·L]` per sample, position in the encoder's sequence of kept then masked patches of each patch (`ids_restore`). */
  restore: Int32Array;
}

/** Patches kept of `numPatches` with `maskRatio` masked (`int(L · (1 − r))`), at least one. */
export function keptPatches(numPatches: number, maskRatio: number): number {
  return Math.max(1, Math.floor(numPatches * (1 - maskRatio) + 1e-9));
}

/** The masks of `samples` (view `view`) for images of `numPatches` patches. */
export function randomMasks(samples: SampleKeys, numPatches: number, maskRatio: number, view = 0): PatchMasks {
  const b = samples.indices.length;
  const k = keptPatches(numPatches, maskRatio);
  const keep = new Int32Array(b * k);
  const mask = new Float32Array(b * numPatches).fill(1);
  const restore = new Int32Array(b * numPatches);
  for (let s = 0; s < b; s++) {
    const rng = Rng.keyed(samples.seed, samples.epoch, samples.indices[s], view, MASK_STREAM);
    const shuffle = rng.permutation(numPatches); // as argsort of i.i.d. noise
    for (let j = 0; j < numPatches; j++) {
      const patch = shuffle[j];
      restore[s * numPatches + patch] = j;
      if (j < k) {
        keep[s * k + j] = patch;
        mask[s * numPatches + patch] = 0;
      }
    }
  }
  return { keptPerSample: k, keep, mask, restore };
}

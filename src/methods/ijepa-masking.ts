/**
 * I-JEPA's multi-block masks (facebookresearch/ijepa `src/masks/multiblock.py`, `MaskCollator`),
 * drawn PER SAMPLE from `Rng.keyed(seed, epoch, index, view, IJEPA_MASK_STREAM)`, so that a
 * sample's masks depend on nothing else: not on its batch, its position in it or the world
 * size (docs/design.md, contract 8).
 *
 * The reference draws the target block shape and the context block shape once per BATCH (from
 * the collator's step counter) and only the positions per sample, then cuts every context to
 * the batch's smallest one. Both couple a sample's masks to its batch (so W ranks of N/W
 * samples would not equal one process of N). Here each sample draws its own shapes (with the
 * reference's formula), and every context is cut to a fixed `contextPatches` (a method
 * argument, the same for every sample) instead of the batch minimum; a context position is
 * redrawn until it keeps at least that many patches, with the reference's relaxation (after
 * 20 failed draws the last target block stops constraining it).
 */
import { invalidValue } from '../core/errors.js';
import { Rng } from '../core/random.js';
import type { SampleKeys } from './base.js';

/** The last key component of the masks' generators. */
export const IJEPA_MASK_STREAM = 0x696a6570;

/** Failed context draws before one more target block stops constraining the context (the reference's `timeout`). */
const DRAWS_PER_RELAXATION = 20;

/** The shape of the multi-block masks (the reference's `mask` config). */
export interface MultiBlockOptions {
  /** Side G of the square patch grid (L = G² patches). */
  gridSize: number;
  /** Target blocks per sample (`num_pred_masks`). */
  numTargets: number;
  /** Area range of a target block as a fraction of the grid (`pred_mask_scale`). */
  targetScale: [number, number];
  /** Height / width range of a target block (`aspect_ratio`). */
  targetAspect: [number, number];
  /** Area range of the (square) context block (`enc_mask_scale`). */
  contextScale: [number, number];
  /** Patches every context keeps (the reference: the batch's smallest context). */
  contextPatches: number;
}

/** The masks of a batch of B samples. */
export interface MultiBlockMasks {
  /** `[B·K]` the context's patch indices per sample (K = contextPatches), row-major order. */
  context: Int32Array;
  /** Per sample: `[numTargets · h·w]` its target blocks' patch indices, block by block, each row-major. */
  targets: Int32Array[];
  /** Per sample: the patches h·w of each of its target blocks. */
  targetSize: number[];
}

/** Python's `round` (half to even), as the reference's block sides use it. */
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The reference's `_sample_block_size`: one uniform draw u sets both the area and the aspect ratio. */
export function blockSize(u: number, gridSize: number, scale: [number, number], aspect: [number, number]): [number, number] {
  const maxKeep = Math.floor(gridSize * gridSize * (scale[0] + u * (scale[1] - scale[0])));
  const ratio = aspect[0] + u * (aspect[1] - aspect[0]);
  const h = Math.max(1, Math.min(gridSize - 1, roundHalfEven(Math.sqrt(maxKeep * ratio))));
  const w = Math.max(1, Math.min(gridSize - 1, roundHalfEven(Math.sqrt(maxKeep / ratio))));
  return [h, w];
}

/** Patch indices (row-major) of the h x w block at (top, left). */
function block(top: number, left: number, h: number, w: number, gridSize: number): number[] {
  const out: number[] = [];
  for (let i = top; i < top + h; i++) for (let j = left; j < left + w; j++) out.push(i * gridSize + j);
  return out;
}

/**
 * Checks `options` (grid at least 2 patches a side, ranges within (0, 1], a context block of
 * the smallest area able to hold `contextPatches`) and throws a one-line error naming the value.
 */
export function checkMultiBlockOptions(options: MultiBlockOptions): void {
  const { gridSize: g, contextPatches, contextScale } = options;
  if (!(Number.isInteger(g) && g >= 2)) throw invalidValue('image size / patch size', g, 'at least 2 patches a side for method ijepa');
  const [h, w] = blockSize(0, g, contextScale, [1, 1]);
  if (!(Number.isInteger(contextPatches) && contextPatches >= 1 && contextPatches <= h * w)) {
    throw invalidValue('method_args.context_patches', contextPatches, `1..${h * w} (the smallest context block, ${h}x${w} patches of the ${g}x${g} grid)`);
  }
}

/** The masks of one sample from its own generator. */
function sampleMasks(rng: Rng, options: MultiBlockOptions): { context: number[]; targets: number[]; size: number } {
  const { gridSize: g, numTargets } = options;
  const [th, tw] = blockSize(rng.uniform(), g, options.targetScale, options.targetAspect);
  const [ch, cw] = blockSize(rng.uniform(), g, options.contextScale, [1, 1]);
  const targets: number[] = [];
  const complements: Array<Set<number>> = [];
  for (let t = 0; t < numTargets; t++) {
    // The reference's torch.randint(0, G - h): the last top-left row (column) is never drawn.
    const patches = block(rng.int(g - th), rng.int(g - tw), th, tw, g);
    targets.push(...patches);
    complements.push(new Set(patches));
  }
  for (let draws = 0; ; draws++) {
    const constraining = Math.max(numTargets - Math.floor(draws / DRAWS_PER_RELAXATION), 0);
    const context = block(rng.int(g - ch), rng.int(g - cw), ch, cw, g).filter((p) => complements.slice(0, constraining).every((s) => !s.has(p)));
    if (context.length >= options.contextPatches) return { context: context.slice(0, options.contextPatches), targets, size: th * tw };
  }
}

/** The multi-block masks of `samples` (view `view`; see the module comment). */
export function multiBlockMasks(samples: SampleKeys, options: MultiBlockOptions, view = 0): MultiBlockMasks {
  checkMultiBlockOptions(options);
  const b = samples.indices.length;
  const k = options.contextPatches;
  const context = new Int32Array(b * k);
  const targets: Int32Array[] = [];
  const targetSize: number[] = [];
  for (let s = 0; s < b; s++) {
    const masks = sampleMasks(Rng.keyed(samples.seed, samples.epoch, samples.indices[s], view, IJEPA_MASK_STREAM), options);
    context.set(masks.context, s * k);
    targets.push(Int32Array.from(masks.targets));
    targetSize.push(masks.size);
  }
  return { context, targets, targetSize };
}

/**
 * The view pipeline: the configuration of a random training view ({@link ViewAugmentation})
 * and of the deterministic eval view ({@link EvalTransform}), their validation, and the
 * functions that compute views of [h, w, c] image bytes as [S, S, c] normalised floats
 * (S = cropSize), following torchvision's semantics as used by solo-learn. Plain
 * JavaScript, no tfjs: the loader's worker threads run {@link augmentBatch}.
 *
 * A training view is
 *
 *   RandomResizedCrop (bilinear) -> RandomApply(ColorJitter, p) -> RandomGrayscale(p)
 *   -> RandomApply(GaussianBlur, p) -> RandomApply(Solarization, p)
 *   -> RandomHorizontalFlip(p) -> ToTensor -> Normalize(mean, std)
 *
 * where ColorJitter applies its four ops in a random order with factors brightness,
 * contrast, saturation in [max(0, 1 - x), 1 + x] and hue in [-x, x]; the ops that are no-ops
 * on 1-channel images (saturation, hue, grayscale) still draw their random numbers. An eval
 * view is Resize(shorter side) -> CenterCrop -> Normalize(mean, std).
 *
 * Determinism (docs/design.md contract 8): every random draw for sample `index`, view `v` in
 * `epoch` comes from `Rng.keyed(seed, epoch, index, v)` (see {@link augmentBatch}), never
 * from a shared stream, so the views of a sample do not depend on batch composition,
 * world size or worker count.
 */
import { UserError } from '../../core/errors.js';
import { Rng } from '../../core/random.js';
import { adjustBrightness, adjustContrast, adjustHue, adjustSaturation, normalizeInto, solarize, toGrayscale } from './color.js';
import { gaussianBlur, hflip, randomResizedCropBox, resizeBilinear, roundHalfEven } from './spatial.js';

/** The random transformation that produces one view of an image. */
export interface ViewAugmentation {
  /** Output height and width S: a view is [S, S, C]. */
  cropSize: number;
  /** RandomResizedCrop area fraction range, e.g. [0.08, 1]. */
  cropScale: [number, number];
  /** RandomResizedCrop aspect ratio range (w / h); default [3/4, 4/3]. */
  cropRatio?: [number, number];
  /** Probability of a horizontal flip. */
  hflipProb: number;
  /** Probability of applying ColorJitter (all four of its ops, in random order). */
  colorJitterProb: number;
  /** Brightness factor drawn from [max(0, 1 - x), 1 + x]; 0 disables. */
  brightness: number;
  /** Contrast factor drawn from [max(0, 1 - x), 1 + x]; 0 disables. */
  contrast: number;
  /** Saturation factor drawn from [max(0, 1 - x), 1 + x]; 0 disables. */
  saturation: number;
  /** Hue shift drawn from [-x, x] (fraction of the colour circle, x <= 0.5); 0 disables. */
  hue: number;
  /** Probability of converting to grayscale (keeping the channel count). */
  grayscaleProb: number;
  /** Probability of a Gaussian blur. */
  gaussianBlurProb: number;
  /** Blur standard deviation range in pixels; default [0.1, 2.0]. */
  blurSigma?: [number, number];
  /** Probability of solarization (values >= 0.5 become 1 - value). */
  solarizationProb: number;
  /** [C] (or [1], broadcast) per-channel mean subtracted from values in [0, 1]. */
  mean: number[];
  /** [C] (or [1], broadcast) per-channel standard deviation divided by. */
  std: number[];
}

/** A deterministic evaluation transform: resize shorter side, center crop, normalise. */
export interface EvalTransform {
  /** Output height and width S: an image becomes [S, S, C]. */
  cropSize: number;
  /** Shorter side after resizing, before the center crop (>= cropSize); default cropSize. */
  resizeSize?: number;
  /** [C] or [1] */
  mean: number[];
  /** [C] or [1] */
  std: number[];
}

/** What {@link augmentBatch} needs of a dataset (a subset of `ImageDataset`). */
export interface PixelSource {
  readonly pixels: Uint8Array;
  readonly height: number;
  readonly width: number;
  readonly channels: number;
}

// ---------------------------------------------------------------------------------------
// validation

function checkProb(field: string, p: number): void {
  if (!(p >= 0 && p <= 1)) throw new UserError(`${field}: ${p} is not allowed; expected a probability in [0, 1]`);
}

function checkRange(field: string, r: unknown, lo: number, hi: number): void {
  if (!Array.isArray(r) || r.length !== 2 || !(r[0] >= lo && r[0] <= r[1] && r[1] <= hi) || !(r[0] > 0 || lo < 0)) {
    throw new UserError(`${field}: ${JSON.stringify(r)} is not allowed; expected [min, max] with ${lo} < min <= max <= ${hi}`);
  }
}

function checkStats(field: string, v: unknown, channels: number, positive: boolean): void {
  const ok =
    Array.isArray(v) && (v.length === channels || v.length === 1) && v.every((x) => typeof x === 'number' && Number.isFinite(x) && (!positive || x > 0));
  if (!ok) {
    throw new UserError(
      `${field}: ${JSON.stringify(v)} is not allowed; expected ${channels === 1 ? '1' : `1 or ${channels}`} ` +
        `${positive ? 'positive ' : ''}number(s), one per channel`,
    );
  }
}

/**
 * Checks a view configuration for an image with `channels` channels; throws a `UserError`
 * naming the field (prefixed by `field`, e.g. `views[1]`) and the allowed values.
 */
export function validateViewAugmentation(aug: ViewAugmentation, channels: number, field = 'augmentation'): void {
  if (!Number.isInteger(aug.cropSize) || aug.cropSize < 1) {
    throw new UserError(`${field}.cropSize: ${aug.cropSize} is not allowed; expected a positive integer`);
  }
  checkRange(`${field}.cropScale`, aug.cropScale, 0, 1);
  if (aug.cropRatio !== undefined) checkRange(`${field}.cropRatio`, aug.cropRatio, 0, Infinity);
  if (aug.blurSigma !== undefined) checkRange(`${field}.blurSigma`, aug.blurSigma, 0, Infinity);
  for (const k of ['hflipProb', 'colorJitterProb', 'grayscaleProb', 'gaussianBlurProb', 'solarizationProb'] as const) {
    checkProb(`${field}.${k}`, aug[k]);
  }
  for (const k of ['brightness', 'contrast', 'saturation'] as const) {
    if (!(aug[k] >= 0 && Number.isFinite(aug[k]))) {
      throw new UserError(`${field}.${k}: ${aug[k]} is not allowed; expected a number >= 0`);
    }
  }
  if (!(aug.hue >= 0 && aug.hue <= 0.5)) {
    throw new UserError(`${field}.hue: ${aug.hue} is not allowed; expected a number in [0, 0.5]`);
  }
  checkStats(`${field}.mean`, aug.mean, channels, false);
  checkStats(`${field}.std`, aug.std, channels, true);
}

/** Checks an eval transform; throws a `UserError` naming the field. */
export function validateEvalTransform(t: EvalTransform, channels: number, field = 'evalTransform'): void {
  if (!Number.isInteger(t.cropSize) || t.cropSize < 1) {
    throw new UserError(`${field}.cropSize: ${t.cropSize} is not allowed; expected a positive integer`);
  }
  if (t.resizeSize !== undefined && !(Number.isInteger(t.resizeSize) && t.resizeSize >= t.cropSize)) {
    throw new UserError(`${field}.resizeSize: ${t.resizeSize} is not allowed; expected an integer >= cropSize (${t.cropSize})`);
  }
  checkStats(`${field}.mean`, t.mean, channels, false);
  checkStats(`${field}.std`, t.std, channels, true);
}

// ---------------------------------------------------------------------------------------
// views

const DEFAULT_RATIO: [number, number] = [3 / 4, 4 / 3];
const DEFAULT_BLUR_SIGMA: [number, number] = [0.1, 2.0];

/** Reusable view memory (augmentation is synchronous, so one per thread suffices). */
let scratch32 = new Float32Array(4096);

function scratchF32(n: number): Float32Array {
  if (scratch32.length < n) scratch32 = new Float32Array(Math.max(n, 2 * scratch32.length));
  return scratch32.subarray(0, n);
}

/**
 * ColorJitter with torchvision's draw order: a random permutation of the four ops, then
 * the factors of the enabled ones (brightness, contrast, saturation, hue).
 */
function colorJitter(img: Float32Array, c: number, aug: ViewAugmentation, rng: Rng): void {
  const order = rng.permutation(4);
  const b = aug.brightness > 0 ? rng.uniformIn(Math.max(0, 1 - aug.brightness), 1 + aug.brightness) : undefined;
  const ct = aug.contrast > 0 ? rng.uniformIn(Math.max(0, 1 - aug.contrast), 1 + aug.contrast) : undefined;
  const s = aug.saturation > 0 ? rng.uniformIn(Math.max(0, 1 - aug.saturation), 1 + aug.saturation) : undefined;
  const h = aug.hue > 0 ? rng.uniformIn(-aug.hue, aug.hue) : undefined;
  for (const op of order) {
    if (op === 0 && b !== undefined) adjustBrightness(img, b);
    else if (op === 1 && ct !== undefined) adjustContrast(img, c, ct);
    else if (op === 2 && s !== undefined) adjustSaturation(img, c, s);
    else if (op === 3 && h !== undefined) adjustHue(img, c, h);
  }
}

/**
 * Where a view came from in its source image: the RandomResizedCrop box (integers, in
 * source-image pixels) that was resized to the view, and whether the view was horizontally
 * flipped (after the crop). VICRegL matches locations across views with it.
 */
export interface CropGeometry {
  /** First source row of the box. */
  top: number;
  /** First source column of the box. */
  left: number;
  /** Rows of the box (>= 1). */
  height: number;
  /** Columns of the box (>= 1). */
  width: number;
  /** Whether the view was flipped left-right. */
  flipped: boolean;
}

/** Numbers per view and sample in {@link augmentBatch}'s `crops`: top, left, height, width, flipped (0 or 1). */
export const CROP_FIELDS = 5;

/**
 * Computes one augmented view of the image at `pixels[offset ..]` ([h, w, c] bytes) into
 * `out[outOffset .. outOffset + S*S*c]` as [S, S, c] normalised floats, drawing every random
 * number from `rng` (normally `Rng.keyed(seed, epoch, index, view)`). `aug` is assumed
 * valid (see {@link validateViewAugmentation}; the loaders validate once). Returns the crop
 * box that was drawn and whether the view was flipped.
 */
export function augmentViewInto(
  pixels: Uint8Array,
  offset: number,
  h: number,
  w: number,
  c: number,
  aug: ViewAugmentation,
  rng: Rng,
  out: Float32Array,
  outOffset: number,
): CropGeometry {
  const S = aug.cropSize;
  const box = randomResizedCropBox(h, w, aug.cropScale, aug.cropRatio ?? DEFAULT_RATIO, rng);
  const img = scratchF32(S * S * c);
  resizeBilinear(pixels, offset, w, c, box, S, S, img, 1 / 255);
  if (rng.uniform() < aug.colorJitterProb) colorJitter(img, c, aug, rng);
  if (rng.uniform() < aug.grayscaleProb) toGrayscale(img, c);
  if (rng.uniform() < aug.gaussianBlurProb) {
    const [lo, hi] = aug.blurSigma ?? DEFAULT_BLUR_SIGMA;
    gaussianBlur(img, S, S, c, rng.uniformIn(lo, hi));
  }
  if (rng.uniform() < aug.solarizationProb) solarize(img);
  const flipped = rng.uniform() < aug.hflipProb;
  if (flipped) hflip(img, S, S, c);
  normalizeInto(img, c, aug.mean, aug.std, out, outOffset);
  return { top: box.top, left: box.left, height: box.height, width: box.width, flipped };
}

/**
 * One augmented view [cropSize, cropSize, c] of the image at `pixels[offset ..]`
 * ([h, w, c] bytes); see {@link augmentViewInto}.
 */
export function augmentView(pixels: Uint8Array, offset: number, h: number, w: number, c: number, aug: ViewAugmentation, rng: Rng): Float32Array {
  const out = new Float32Array(aug.cropSize * aug.cropSize * c);
  augmentViewInto(pixels, offset, h, w, c, aug, rng, out, 0);
  return out;
}

/** What {@link augmentBatch} returns. */
export interface AugmentedViews {
  /** One [B, S_v, S_v, C] array per view v: row k is view v of sample k. */
  views: Float32Array[];
  /**
   * One [B, CROP_FIELDS] array per view v: row k is (top, left, height, width, flipped ? 1 : 0)
   * of view v of sample k, the crop box in source-image pixels (see {@link CropGeometry}).
   */
  crops: Float32Array[];
}

/**
 * The views of a batch: for each view v, a [B, S_v, S_v, C] array whose row k is
 * view v of image `indices[k]`, drawn from `Rng.keyed(seed, epoch, indices[k], v)`, and a
 * [B, CROP_FIELDS] array whose row k is that view's crop box and flip (see {@link AugmentedViews}).
 * The image of sample k is row `rows[k]` of `source.pixels` ([rows, h, w, c]): by default
 * `indices[k]` (a whole in-memory dataset), or the batch's own row of decoded files.
 * Used identically by the loader's inline path and its worker threads.
 */
export function augmentBatch(
  source: PixelSource,
  views: readonly ViewAugmentation[],
  seed: number,
  epoch: number,
  indices: ArrayLike<number>,
  rows: ArrayLike<number> = indices,
): AugmentedViews {
  const { height: h, width: w, channels: c } = source;
  const imageBytes = h * w * c;
  const out: Float32Array[] = [];
  const crops: Float32Array[] = [];
  for (let v = 0; v < views.length; v++) {
    const aug = views[v];
    const viewSize = aug.cropSize * aug.cropSize * c;
    const arr = new Float32Array(indices.length * viewSize);
    const geo = new Float32Array(indices.length * CROP_FIELDS);
    for (let k = 0; k < indices.length; k++) {
      const index = indices[k];
      const g = augmentViewInto(source.pixels, rows[k] * imageBytes, h, w, c, aug, Rng.keyed(seed, epoch, index, v), arr, k * viewSize);
      geo.set([g.top, g.left, g.height, g.width, g.flipped ? 1 : 0], k * CROP_FIELDS);
    }
    out.push(arr);
    crops.push(geo);
  }
  return { views: out, crops };
}

// ---------------------------------------------------------------------------------------
// evaluation transform

/**
 * The deterministic eval view of an image into `out` at `outOffset` ([S, S, c]): resize
 * so the shorter side is `resizeSize` (default `cropSize`; bilinear, antialiased), center
 * crop S x S, normalise. An S x S image with the default resize is only normalised.
 */
export function evalViewInto(
  pixels: Uint8Array,
  offset: number,
  h: number,
  w: number,
  c: number,
  t: EvalTransform,
  out: Float32Array,
  outOffset: number,
): void {
  const S = t.cropSize;
  const R = t.resizeSize ?? S;
  // torchvision Resize(int): shorter side -> R, longer side int(R * long / short)
  const rh = h <= w ? R : Math.floor((R * h) / w);
  const rw = h <= w ? Math.floor((R * w) / h) : R;
  const resized = new Float32Array(rh * rw * c);
  resizeBilinear(pixels, offset, w, c, { top: 0, left: 0, height: h, width: w }, rh, rw, resized, 1 / 255);
  const top = roundHalfEven((rh - S) / 2);
  const left = roundHalfEven((rw - S) / 2);
  const img = new Float32Array(S * S * c);
  for (let y = 0; y < S; y++) {
    img.set(resized.subarray(((top + y) * rw + left) * c, ((top + y) * rw + left + S) * c), y * S * c);
  }
  normalizeInto(img, c, t.mean, t.std, out, outOffset);
}

/**
 * The eval views of a batch: [B, S, S, C] whose row k is the eval view of row `rows[k]` of
 * `source.pixels` ([rows, h, w, c]); see {@link evalViewInto}.
 */
export function evalBatch(source: PixelSource, t: EvalTransform, rows: ArrayLike<number>): Float32Array {
  const { height: h, width: w, channels: c } = source;
  const viewSize = t.cropSize * t.cropSize * c;
  const out = new Float32Array(rows.length * viewSize);
  for (let k = 0; k < rows.length; k++) evalViewInto(source.pixels, rows[k] * h * w * c, h, w, c, t, out, k * viewSize);
  return out;
}

/** The eval view [cropSize, cropSize, c] of one image; see {@link evalViewInto}. */
export function evalView(pixels: Uint8Array, offset: number, h: number, w: number, c: number, t: EvalTransform): Float32Array {
  const out = new Float32Array(t.cropSize * t.cropSize * c);
  evalViewInto(pixels, offset, h, w, c, t, out, 0);
  return out;
}

/**
 * Per-sample image augmentation in plain JavaScript on `Float32Array`s (no tfjs, so it runs
 * in loader worker threads), following torchvision's semantics as used by solo-learn:
 *
 *   RandomResizedCrop (bilinear) -> RandomApply(ColorJitter, p) -> RandomGrayscale(p)
 *   -> RandomApply(GaussianBlur, p) -> RandomApply(Solarization, p)
 *   -> RandomHorizontalFlip(p) -> ToTensor -> Normalize(mean, std)
 *
 * Resampling is bilinear with half-pixel centers, antialiased when downscaling (solo-learn
 * asks torchvision for bicubic; bilinear is what this library specifies).
 * Images are HWC. Intermediate values are floats in [0, 1] (pixels / 255), clamped after
 * every colour operation like torchvision's float-tensor ops (solo-learn runs the same ops
 * on uint8 PIL images, which also round to 1/255 after each op; that is the only
 * difference). ColorJitter applies its four ops in a random order with factors
 * brightness, contrast, saturation in [max(0, 1 - x), 1 + x] and hue in [-x, x]. On
 * 1-channel images saturation, hue and grayscale are no-ops (they still draw their random
 * numbers), and contrast blends with the image mean.
 *
 * Determinism (docs/design.md contract 8): every random draw for sample `index`, view `v` in
 * `epoch` comes from `Rng.keyed(seed, epoch, index, v)` (see {@link augmentBatch}), never
 * from a shared stream, so the views of a sample do not depend on batch composition,
 * world size or worker count.
 */
import { UserError } from '../core/errors.js';
import { Rng } from '../core/random.js';
import { normalizationFor, type ChannelStats, type ImageDataset } from './dataset.js';

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

/** An integer crop box in pixels. */
export interface CropBox {
  top: number;
  left: number;
  height: number;
  width: number;
}

/** What {@link augmentBatch} needs of a dataset (a subset of {@link ImageDataset}). */
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
    throw new UserError(
      `${field}: ${JSON.stringify(r)} is not allowed; expected [min, max] with ${lo} < min <= max <= ${hi}`,
    );
  }
}

function checkStats(field: string, v: unknown, channels: number, positive: boolean): void {
  const ok =
    Array.isArray(v) &&
    (v.length === channels || v.length === 1) &&
    v.every((x) => typeof x === 'number' && Number.isFinite(x) && (!positive || x > 0));
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

// ---------------------------------------------------------------------------------------
// geometry

/** Python's round(): half to even. */
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * torchvision's `RandomResizedCrop.get_params`: up to 10 tries of an area fraction in
 * `scale` and a log-uniform aspect ratio in `ratio`, else a central crop.
 */
export function randomResizedCropBox(
  height: number,
  width: number,
  scale: readonly [number, number],
  ratio: readonly [number, number],
  rng: Rng,
): CropBox {
  const area = height * width;
  const logLo = Math.log(ratio[0]);
  const logHi = Math.log(ratio[1]);
  for (let attempt = 0; attempt < 10; attempt++) {
    const targetArea = area * rng.uniformIn(scale[0], scale[1]);
    const aspect = Math.exp(rng.uniformIn(logLo, logHi));
    const w = roundHalfEven(Math.sqrt(targetArea * aspect));
    const h = roundHalfEven(Math.sqrt(targetArea / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const top = rng.int(height - h + 1);
      const left = rng.int(width - w + 1);
      return { top, left, height: h, width: w };
    }
  }
  const inRatio = width / height;
  let w = width;
  let h = height;
  if (inRatio < ratio[0]) h = roundHalfEven(w / ratio[0]);
  else if (inRatio > ratio[1]) w = roundHalfEven(h * ratio[1]);
  return { top: Math.floor((height - h) / 2), left: Math.floor((width - w) / 2), height: h, width: w };
}

interface Coefficients {
  start: Int32Array;
  count: Int32Array;
  /** [outSize, kmax] */
  weights: Float64Array;
  kmax: number;
}

/**
 * Bilinear (triangle filter) resampling weights from `inSize` to `outSize` samples, with
 * half-pixel centers (align_corners=false) and, when downscaling, the filter widened by
 * the scale (antialiasing, as PIL and torchvision's antialias=True do). Equal sizes give
 * the identity.
 */
function computeBilinearCoefficients(inSize: number, outSize: number): Coefficients {
  const scale = inSize / outSize;
  const fscale = Math.max(scale, 1);
  const support = fscale;
  const kmax = Math.ceil(support) * 2 + 1;
  const start = new Int32Array(outSize);
  const count = new Int32Array(outSize);
  const weights = new Float64Array(outSize * kmax);
  for (let o = 0; o < outSize; o++) {
    const center = (o + 0.5) * scale;
    const lo = Math.max(Math.floor(center - support + 0.5), 0);
    const hi = Math.min(Math.floor(center + support + 0.5), inSize);
    let sum = 0;
    const n = Math.min(hi - lo, kmax);
    for (let k = 0; k < n; k++) {
      const t = Math.abs((lo + k - center + 0.5) / fscale);
      const wgt = t < 1 ? 1 - t : 0;
      weights[o * kmax + k] = wgt;
      sum += wgt;
    }
    if (sum > 0) for (let k = 0; k < n; k++) weights[o * kmax + k] /= sum;
    start[o] = lo;
    count[o] = n;
  }
  return { start, count, weights, kmax };
}

const coefficientCache = new Map<number, Coefficients>();

/** Cached {@link computeBilinearCoefficients} (crop sizes repeat a lot). */
function bilinearCoefficients(inSize: number, outSize: number): Coefficients {
  const key = inSize * 65536 + outSize;
  let c = coefficientCache.get(key);
  if (c === undefined) {
    if (coefficientCache.size > 4096) coefficientCache.clear();
    c = computeBilinearCoefficients(inSize, outSize);
    coefficientCache.set(key, c);
  }
  return c;
}

/** Reusable scratch memory (augmentation is synchronous, so one per thread suffices). */
let scratch64 = new Float64Array(4096);
let scratch32 = new Float32Array(4096);

function scratchF64(n: number): Float64Array {
  if (scratch64.length < n) scratch64 = new Float64Array(Math.max(n, 2 * scratch64.length));
  return scratch64;
}

function scratchF32(n: number): Float32Array {
  if (scratch32.length < n) scratch32 = new Float32Array(Math.max(n, 2 * scratch32.length));
  return scratch32.subarray(0, n);
}

/**
 * Resizes the `box` of an image (`src` [h, w, c] at `srcOffset`) to [outH, outW, c] with
 * (antialiased) bilinear interpolation, multiplying values by `valueScale` (1/255 turns
 * bytes into [0, 1]); writes `out` from index 0.
 */
export function resizeBilinear(
  src: Uint8Array,
  srcOffset: number,
  w: number,
  c: number,
  box: CropBox,
  outH: number,
  outW: number,
  out: Float32Array,
  valueScale = 1,
): void {
  const cx = bilinearCoefficients(box.width, outW);
  const cy = bilinearCoefficients(box.height, outH);
  const rowStride = w * c;
  // horizontal pass: [box.height, outW, c]
  const tmp = scratchF64(box.height * outW * c);
  for (let y = 0; y < box.height; y++) {
    const rowBase = srcOffset + (box.top + y) * rowStride + box.left * c;
    for (let o = 0; o < outW; o++) {
      const s = cx.start[o];
      const n = cx.count[o];
      const wb = o * cx.kmax;
      for (let ch = 0; ch < c; ch++) {
        let acc = 0;
        for (let k = 0; k < n; k++) acc += cx.weights[wb + k] * src[rowBase + (s + k) * c + ch];
        tmp[(y * outW + o) * c + ch] = acc;
      }
    }
  }
  // vertical pass
  const tmpStride = outW * c;
  for (let o = 0; o < outH; o++) {
    const s = cy.start[o];
    const n = cy.count[o];
    const wb = o * cy.kmax;
    for (let i = 0; i < tmpStride; i++) {
      let acc = 0;
      for (let k = 0; k < n; k++) acc += cy.weights[wb + k] * tmp[(s + k) * tmpStride + i];
      out[o * tmpStride + i] = acc * valueScale;
    }
  }
}

/** Mirrors an image [h, w, c] left-right in place. */
export function hflip(img: Float32Array, h: number, w: number, c: number): void {
  for (let y = 0; y < h; y++) {
    const row = y * w * c;
    for (let x = 0; x < w >> 1; x++) {
      const a = row + x * c;
      const b = row + (w - 1 - x) * c;
      for (let ch = 0; ch < c; ch++) {
        const t = img[a + ch];
        img[a + ch] = img[b + ch];
        img[b + ch] = t;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// colour (images of values in [0, 1], HWC, `c` channels)

const LUMA_R = 0.299;
const LUMA_G = 0.587;
const LUMA_B = 0.114;

function clamp01(v: number): number {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

/** torchvision `adjust_brightness`: v * factor, clamped to [0, 1]; in place. */
export function adjustBrightness(img: Float32Array, factor: number): void {
  for (let i = 0; i < img.length; i++) img[i] = clamp01(img[i] * factor);
}

/** Mean luma of an image (mean value for 1 channel). */
function meanGray(img: Float32Array, c: number): number {
  let s = 0;
  if (c === 3) {
    for (let i = 0; i < img.length; i += 3) s += LUMA_R * img[i] + LUMA_G * img[i + 1] + LUMA_B * img[i + 2];
  } else {
    for (let i = 0; i < img.length; i++) s += img[i];
  }
  return s / (img.length / c);
}

/** torchvision `adjust_contrast`: blend with the mean luma, factor * v + (1 - factor) * mean. */
export function adjustContrast(img: Float32Array, c: number, factor: number): void {
  const m = (1 - factor) * meanGray(img, c);
  for (let i = 0; i < img.length; i++) img[i] = clamp01(factor * img[i] + m);
}

/** torchvision `adjust_saturation`: blend each pixel with its luma; no-op for 1 channel. */
export function adjustSaturation(img: Float32Array, c: number, factor: number): void {
  if (c !== 3) return;
  for (let i = 0; i < img.length; i += 3) {
    const g = (1 - factor) * (LUMA_R * img[i] + LUMA_G * img[i + 1] + LUMA_B * img[i + 2]);
    img[i] = clamp01(factor * img[i] + g);
    img[i + 1] = clamp01(factor * img[i + 1] + g);
    img[i + 2] = clamp01(factor * img[i + 2] + g);
  }
}

/**
 * torchvision `adjust_hue`: RGB -> HSV, h := (h + shift) mod 1, HSV -> RGB; `shift` in
 * [-0.5, 0.5]. No-op for 1 channel.
 */
export function adjustHue(img: Float32Array, c: number, shift: number): void {
  if (c !== 3) return;
  for (let i = 0; i < img.length; i += 3) {
    const r = img[i];
    const g = img[i + 1];
    const b = img[i + 2];
    const maxc = Math.max(r, g, b);
    const minc = Math.min(r, g, b);
    const cr = maxc - minc;
    if (cr === 0) continue; // gray: hue undefined, unchanged
    const s = cr / maxc;
    const rc = (maxc - r) / cr;
    const gc = (maxc - g) / cr;
    const bc = (maxc - b) / cr;
    let h: number;
    if (maxc === r) h = bc - gc;
    else if (maxc === g) h = 2 + rc - bc;
    else h = 4 + gc - rc;
    h = (h / 6 + 1) % 1;
    h = (((h + shift) % 1) + 1) % 1;
    const v = maxc;
    const h6 = h * 6;
    let sector = Math.floor(h6);
    const f = h6 - sector;
    sector %= 6;
    const p = clamp01(v * (1 - s));
    const q = clamp01(v * (1 - s * f));
    const t = clamp01(v * (1 - s * (1 - f)));
    let R: number, G: number, B: number;
    switch (sector) {
      case 0: R = v; G = t; B = p; break;
      case 1: R = q; G = v; B = p; break;
      case 2: R = p; G = v; B = t; break;
      case 3: R = p; G = q; B = v; break;
      case 4: R = t; G = p; B = v; break;
      default: R = v; G = p; B = q; break;
    }
    img[i] = R;
    img[i + 1] = G;
    img[i + 2] = B;
  }
}

/**
 * Grayscale with luma weights 0.299 R + 0.587 G + 0.114 B, written to all 3 channels
 * (the channel count is kept); no-op for 1 channel.
 */
export function toGrayscale(img: Float32Array, c: number): void {
  if (c !== 3) return;
  for (let i = 0; i < img.length; i += 3) {
    const l = LUMA_R * img[i] + LUMA_G * img[i + 1] + LUMA_B * img[i + 2];
    img[i] = l;
    img[i + 1] = l;
    img[i + 2] = l;
  }
}

/** Solarization: values >= `threshold` (default 0.5, PIL's 128/255 on bytes) become 1 - v. */
export function solarize(img: Float32Array, threshold = 0.5): void {
  for (let i = 0; i < img.length; i++) if (img[i] >= threshold) img[i] = 1 - img[i];
}

function reflectIndex(i: number, n: number): number {
  if (n === 1) return 0;
  const period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i >= n ? period - i : i;
}

/**
 * Separable Gaussian blur with standard deviation `sigma` pixels (kernel radius
 * ceil(3 sigma), reflect padding) of an image [h, w, c], in place.
 */
export function gaussianBlur(img: Float32Array, h: number, w: number, c: number, sigma: number): void {
  const radius = Math.max(1, Math.ceil(3 * sigma));
  const kernel = new Float64Array(2 * radius + 1);
  let sum = 0;
  for (let k = -radius; k <= radius; k++) {
    const v = Math.exp(-(k * k) / (2 * sigma * sigma));
    kernel[k + radius] = v;
    sum += v;
  }
  for (let k = 0; k < kernel.length; k++) kernel[k] /= sum;
  const tmp = scratchF64(img.length);
  // horizontal
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      for (let ch = 0; ch < c; ch++) {
        let acc = 0;
        for (let k = -radius; k <= radius; k++) {
          acc += kernel[k + radius] * img[(y * w + reflectIndex(x + k, w)) * c + ch];
        }
        tmp[(y * w + x) * c + ch] = acc;
      }
    }
  }
  // vertical
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      for (let ch = 0; ch < c; ch++) {
        let acc = 0;
        for (let k = -radius; k <= radius; k++) {
          acc += kernel[k + radius] * tmp[(reflectIndex(y + k, h) * w + x) * c + ch];
        }
        img[(y * w + x) * c + ch] = acc;
      }
    }
  }
}

/** Writes (img - mean) / std per channel into `out` at `outOffset`. */
function normalizeInto(
  img: Float32Array,
  c: number,
  mean: readonly number[],
  std: readonly number[],
  out: Float32Array,
  outOffset: number,
): void {
  const m = new Float64Array(c);
  const inv = new Float64Array(c);
  for (let ch = 0; ch < c; ch++) {
    m[ch] = mean.length === 1 ? mean[0] : mean[ch];
    inv[ch] = 1 / (std.length === 1 ? std[0] : std[ch]);
  }
  for (let i = 0; i < img.length; i += c) {
    for (let ch = 0; ch < c; ch++) out[outOffset + i + ch] = (img[i + ch] - m[ch]) * inv[ch];
  }
}

// ---------------------------------------------------------------------------------------
// views

const DEFAULT_RATIO: [number, number] = [3 / 4, 4 / 3];
const DEFAULT_BLUR_SIGMA: [number, number] = [0.1, 2.0];

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
 * Computes one augmented view of the image at `pixels[offset ..]` ([h, w, c] bytes) into
 * `out[outOffset .. outOffset + S*S*c]` as [S, S, c] normalised floats, drawing every random
 * number from `rng` (normally `Rng.keyed(seed, epoch, index, view)`). `aug` is assumed
 * valid (see {@link validateViewAugmentation}; the loaders validate once).
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
): void {
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
  if (rng.uniform() < aug.hflipProb) hflip(img, S, S, c);
  normalizeInto(img, c, aug.mean, aug.std, out, outOffset);
}

/**
 * One augmented view [cropSize, cropSize, c] of the image at `pixels[offset ..]`
 * ([h, w, c] bytes); see {@link augmentViewInto}.
 */
export function augmentView(
  pixels: Uint8Array,
  offset: number,
  h: number,
  w: number,
  c: number,
  aug: ViewAugmentation,
  rng: Rng,
): Float32Array {
  const out = new Float32Array(aug.cropSize * aug.cropSize * c);
  augmentViewInto(pixels, offset, h, w, c, aug, rng, out, 0);
  return out;
}

/**
 * The views of a batch: for each view v, a [B, S_v, S_v, C] array whose row k is
 * view v of image `indices[k]`, drawn from `Rng.keyed(seed, epoch, indices[k], v)`.
 * Used identically by the loader's inline path and its worker threads.
 */
export function augmentBatch(
  source: PixelSource,
  views: readonly ViewAugmentation[],
  seed: number,
  epoch: number,
  indices: ArrayLike<number>,
): Float32Array[] {
  const { height: h, width: w, channels: c } = source;
  const imageBytes = h * w * c;
  const out: Float32Array[] = [];
  for (let v = 0; v < views.length; v++) {
    const aug = views[v];
    const viewSize = aug.cropSize * aug.cropSize * c;
    const arr = new Float32Array(indices.length * viewSize);
    for (let k = 0; k < indices.length; k++) {
      const index = indices[k];
      augmentViewInto(source.pixels, index * imageBytes, h, w, c, aug, Rng.keyed(seed, epoch, index, v), arr, k * viewSize);
    }
    out.push(arr);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// evaluation transform

/** Checks an eval transform; throws a `UserError` naming the field. */
export function validateEvalTransform(t: EvalTransform, channels: number, field = 'evalTransform'): void {
  if (!Number.isInteger(t.cropSize) || t.cropSize < 1) {
    throw new UserError(`${field}.cropSize: ${t.cropSize} is not allowed; expected a positive integer`);
  }
  if (t.resizeSize !== undefined && !(Number.isInteger(t.resizeSize) && t.resizeSize >= t.cropSize)) {
    throw new UserError(
      `${field}.resizeSize: ${t.resizeSize} is not allowed; expected an integer >= cropSize (${t.cropSize})`,
    );
  }
  checkStats(`${field}.mean`, t.mean, channels, false);
  checkStats(`${field}.std`, t.std, channels, true);
}

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

/** The eval view [cropSize, cropSize, c] of one image; see {@link evalViewInto}. */
export function evalView(
  pixels: Uint8Array,
  offset: number,
  h: number,
  w: number,
  c: number,
  t: EvalTransform,
): Float32Array {
  const out = new Float32Array(t.cropSize * t.cropSize * c);
  evalViewInto(pixels, offset, h, w, c, t, out, 0);
  return out;
}

// ---------------------------------------------------------------------------------------
// presets

/** Crop sizes above this use solo-learn's ImageNet recipes (with blur), else CIFAR's. */
const LARGE_IMAGE = 64;

function presetBase(dataset: ImageDataset, cropSize: number | undefined, stats: ChannelStats | undefined) {
  const S = cropSize ?? Math.min(dataset.height, dataset.width);
  const { mean, std } = stats ?? normalizationFor(dataset);
  // solo-learn crops 8-100% of the area; below 32 px that leaves a few pixels, so 20-100%
  const minScale = Math.min(dataset.height, dataset.width) >= 32 ? 0.08 : 0.2;
  return { S, mean, std, minScale, large: S > LARGE_IMAGE };
}

/** Options shared by the preset recipes. */
export interface PresetOptions {
  /** Normalisation; default `normalizationFor(dataset)`. */
  stats?: ChannelStats;
  /** Fields that replace the recipe's in every view (e.g. `{ cropScale: [0.2, 1] }`). */
  overrides?: Partial<ViewAugmentation>;
}

/**
 * solo-learn's SimCLR recipe: two identically configured views. RandomResizedCrop
 * (scale [0.08, 1], or [0.2, 1] for images under 32 px), ColorJitter(0.8, 0.8, 0.8, 0.2)
 * with p = 0.8, grayscale p = 0.2, flip p = 0.5, no solarization. Gaussian blur
 * (sigma 0.1..2) with p = 0.5 only for crops above 64 px (ImageNet recipe); none on small
 * images, as in solo-learn's original CIFAR script. `cropSize` defaults to the image size.
 */
export function simclrViews(dataset: ImageDataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.8, 0.8, 0.8, 0.2]);
  const view: ViewAugmentation = { ...base, gaussianBlurProb: large ? 0.5 : 0, ...options.overrides };
  return [view, { ...view, mean: [...view.mean], std: [...view.std] }];
}

/**
 * solo-learn's asymmetric BYOL recipe: RandomResizedCrop (as {@link simclrViews}),
 * ColorJitter(0.4, 0.4, 0.2, 0.1) p = 0.8, grayscale p = 0.2, flip p = 0.5; view 1 never
 * solarizes, view 2 solarizes with p = 0.2. Gaussian blur for crops above 64 px: p = 1.0
 * (view 1) and 0.1 (view 2), the ImageNet recipe; none on small images (CIFAR recipe).
 */
export function byolViews(dataset: ImageDataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  const { view: base, large } = recipeView(dataset, cropSize, options.stats, [0.4, 0.4, 0.2, 0.1]);
  return [
    { ...base, gaussianBlurProb: large ? 1.0 : 0, solarizationProb: 0, ...options.overrides },
    { ...base, mean: [...base.mean], std: [...base.std], gaussianBlurProb: large ? 0.1 : 0, solarizationProb: 0.2, ...options.overrides },
  ];
}

/**
 * What solo-learn's recipes share: RandomResizedCrop (scale from {@link presetBase}, ratio
 * 3/4..4/3), flip p = 0.5, ColorJitter(brightness, contrast, saturation, hue) = `jitter`
 * with p = 0.8, grayscale p = 0.2, blur sigma range 0.1..2 but no blur or solarization yet;
 * `large` tells whether the crop is big enough for the ImageNet blur.
 */
function recipeView(
  dataset: ImageDataset, cropSize: number | undefined, stats: ChannelStats | undefined,
  [brightness, contrast, saturation, hue]: [number, number, number, number],
): { view: ViewAugmentation; large: boolean } {
  const { S, mean, std, minScale, large } = presetBase(dataset, cropSize, stats);
  const view: ViewAugmentation = {
    cropSize: S,
    cropScale: [minScale, 1],
    cropRatio: [3 / 4, 4 / 3],
    hflipProb: 0.5,
    colorJitterProb: 0.8,
    brightness,
    contrast,
    saturation,
    hue,
    grayscaleProb: 0.2,
    gaussianBlurProb: 0,
    blurSigma: [0.1, 2.0],
    solarizationProb: 0,
    mean,
    std,
  };
  return { view, large };
}

/** solo-learn's Barlow Twins recipe: the same asymmetric recipe as {@link byolViews}. */
export function barlowViews(dataset: ImageDataset, cropSize?: number, options: PresetOptions = {}): ViewAugmentation[] {
  return byolViews(dataset, cropSize, options);
}

/**
 * The eval transform for a dataset: resize/center crop to `cropSize` (default the image
 * size, i.e. no resampling) and the dataset's normalisation.
 */
export function evalTransform(dataset: ImageDataset, cropSize?: number, stats?: ChannelStats): EvalTransform {
  const S = cropSize ?? Math.min(dataset.height, dataset.width);
  const { mean, std } = stats ?? normalizationFor(dataset);
  return { cropSize: S, resizeSize: S, mean, std };
}

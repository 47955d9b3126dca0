/**
 * The spatial operations of the augmentation pipeline on HWC images, following
 * torchvision: the RandomResizedCrop box, resampling, horizontal flip and Gaussian blur.
 * Plain JavaScript, no tfjs, so they run in loader worker threads.
 *
 * Resampling ({@link resizeBilinear}) reads [h, w, c] bytes and writes [outH, outW, c]
 * floats; it is bilinear with half-pixel centers, antialiased when downscaling (solo-learn
 * asks torchvision for bicubic; bilinear is what this library specifies). Flip and blur
 * work in place on `Float32Array` images [h, w, c].
 */
import type { Rng } from '../../core/random.js';

/** An integer crop box in pixels. */
export interface CropBox {
  top: number;
  left: number;
  height: number;
  width: number;
}

/** Python's round(): half to even. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * torchvision's `RandomResizedCrop.get_params`: up to 10 tries of an area fraction in
 * `scale` and a log-uniform aspect ratio in `ratio`, else a central crop.
 */
export function randomResizedCropBox(height: number, width: number, scale: readonly [number, number], ratio: readonly [number, number], rng: Rng): CropBox {
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

function scratchF64(n: number): Float64Array {
  if (scratch64.length < n) scratch64 = new Float64Array(Math.max(n, 2 * scratch64.length));
  return scratch64;
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

/**
 * The value operations of the augmentation pipeline on `Float32Array` images [h, w, c] of
 * values in [0, 1] (pixels / 255): torchvision's colour adjustments of ColorJitter,
 * grayscale and solarization, in place, and the final per-channel normalisation into the
 * output array. Plain JavaScript, no tfjs, so they run in loader worker threads.
 *
 * The colour operations clamp to [0, 1] after every operation like torchvision's
 * float-tensor ops (solo-learn runs the same ops on uint8 PIL images, which also round to
 * 1/255 after each op; that is the only difference). On 1-channel images saturation, hue
 * and grayscale are no-ops, and contrast blends with the image mean.
 */

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
      case 0:
        R = v;
        G = t;
        B = p;
        break;
      case 1:
        R = q;
        G = v;
        B = p;
        break;
      case 2:
        R = p;
        G = v;
        B = t;
        break;
      case 3:
        R = p;
        G = q;
        B = v;
        break;
      case 4:
        R = t;
        G = p;
        B = v;
        break;
      default:
        R = v;
        G = p;
        B = q;
        break;
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
/** Writes (img - mean) / std per channel into `out` at `outOffset`. */
export function normalizeInto(img: Float32Array, c: number, mean: readonly number[], std: readonly number[], out: Float32Array, outOffset: number): void {
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

/**
 * A seeded synthetic image dataset with real class structure: each class is a shape or
 * texture family drawn at a random position, scale and intensity on a varying background
 * with pixel noise. It is fast to generate and small, yet a self-supervised model has to
 * learn shape to separate the classes, so kNN accuracy on its features is meaningful.
 */
import { invalidValue } from '../core/errors.js';
import { Rng } from '../core/random.js';
import { allocPixels, createDataset, type ImageDataset } from './dataset.js';

/** The class families of the synthetic dataset, in label order. */
export const SYNTHETIC_CLASS_NAMES: readonly string[] = Object.freeze([
  'square',
  'ring',
  'plus',
  'horizontal-stripes',
  'vertical-stripes',
  'diagonal-stripes',
  'checkerboard',
  'triangle',
  'two-dots',
  'x-cross',
]);

export interface SyntheticOptions {
  split: 'train' | 'test';
  /** Base seed; train and test use different streams of it. Default 0. */
  seed?: number;
  /** Number of images; default 2048 (train) / 512 (test). */
  size?: number;
  /** Image height and width in pixels; default 16 (at least 8). */
  imageSize?: number;
  /** 1 (grayscale, default) or 3 (random foreground/background colours per image). */
  channels?: number;
}

/** Key word that separates the synthetic data streams from all other keyed streams. */
const SYNTHETIC_TAG = 0x5e7d_a7a0;
const SUPERSAMPLE = 2;

type Mask = (u: number, v: number, x: number, y: number) => boolean;

interface ShapeParams {
  cx: number;
  cy: number;
  r: number;
  /** stripe period in pixels */
  period: number;
  phase: number;
  angle: number;
  flip: boolean;
}

function shapeMask(label: number, p: ShapeParams): Mask {
  const w = (2 * Math.PI) / p.period;
  const inBox = (u: number, v: number): boolean => Math.abs(u) <= 1 && Math.abs(v) <= 1;
  switch (label) {
    case 0: // filled square
      return (u, v) => Math.abs(u) <= 0.8 && Math.abs(v) <= 0.8;
    case 1: {
      // ring
      return (u, v) => {
        const d = Math.hypot(u, v);
        return d >= 0.5 && d <= 1;
      };
    }
    case 2: // plus
      return (u, v) => (Math.abs(u) <= 0.3 && Math.abs(v) <= 1) || (Math.abs(v) <= 0.3 && Math.abs(u) <= 1);
    case 3: // horizontal stripes
      return (u, v, _x, y) => inBox(u, v) && Math.sin(w * y + p.phase) > 0;
    case 4: // vertical stripes
      return (u, v, x) => inBox(u, v) && Math.sin(w * x + p.phase) > 0;
    case 5: {
      // diagonal stripes, either orientation (so a horizontal flip stays in the class)
      const s = p.flip ? -1 : 1;
      return (u, v, x, y) => inBox(u, v) && Math.sin((w * (x + s * y)) / Math.SQRT2 + p.phase) > 0;
    }
    case 6: // checkerboard
      return (u, v, x, y) => inBox(u, v) && Math.sin(w * x + p.phase) * Math.sin(w * y + p.phase * 0.7) > 0;
    case 7: // upward triangle
      return (u, v) => v >= -0.9 && v <= 0.9 && Math.abs(u) <= (v + 0.9) / 1.8;
    case 8: {
      // two dots at a random angle
      const dx = 0.58 * Math.cos(p.angle);
      const dy = 0.58 * Math.sin(p.angle);
      return (u, v) => Math.hypot(u - dx, v - dy) <= 0.4 || Math.hypot(u + dx, v + dy) <= 0.4;
    }
    case 9: // x-cross (diagonals)
      return (u, v) => inBox(u, v) && (Math.abs(u - v) <= 0.32 || Math.abs(u + v) <= 0.32);
    default:
      throw new Error(`no synthetic class ${label}`);
  }
}

/**
 * Draws image `index` of a split into `out` ([size, size, channels] at `offset`), using
 * only `Rng.keyed(seed, tag, split, index)`, so image i does not depend on the dataset size.
 */
function drawImage(out: Uint8Array, offset: number, size: number, channels: number, label: number, rng: Rng): void {
  const r = size * rng.uniformIn(0.24, 0.46);
  const margin = r * 0.85;
  const params: ShapeParams = {
    cx: rng.uniformIn(margin, size - margin),
    cy: rng.uniformIn(margin, size - margin),
    r,
    period: rng.uniformIn(3, 4.5) * (size / 16) ** 0.5,
    phase: rng.uniformIn(0, 2 * Math.PI),
    angle: rng.uniformIn(0, Math.PI),
    flip: rng.bernoulli(0.5),
  };
  const mask = shapeMask(label, params);
  // background level with a gentle linear gradient, foreground clearly brighter
  const bg = rng.uniformIn(0.0, 0.45);
  const fg = Math.min(1, bg + rng.uniformIn(0.2, 0.65));
  const gx = rng.uniformIn(-0.3, 0.3) / size;
  const gy = rng.uniformIn(-0.3, 0.3) / size;
  const noise = rng.uniformIn(0.03, 0.12);
  // colours (3 channels): random hues for foreground and background, scaled by level
  const fgColor = [1, 1, 1];
  const bgColor = [1, 1, 1];
  if (channels === 3) {
    for (let k = 0; k < 3; k++) {
      fgColor[k] = rng.uniformIn(0.55, 1);
      bgColor[k] = rng.uniformIn(0.55, 1);
    }
  }
  const inv = 1 / SUPERSAMPLE;
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      let cover = 0;
      for (let sy = 0; sy < SUPERSAMPLE; sy++) {
        for (let sx = 0; sx < SUPERSAMPLE; sx++) {
          const px = x + (sx + 0.5) * inv;
          const py = y + (sy + 0.5) * inv;
          if (mask((px - params.cx) / r, (py - params.cy) / r, px, py)) cover++;
        }
      }
      const m = cover / (SUPERSAMPLE * SUPERSAMPLE);
      const back = bg + gx * (x - size / 2) + gy * (y - size / 2);
      const base = offset + (y * size + x) * channels;
      for (let k = 0; k < channels; k++) {
        const v = back * bgColor[k] * (1 - m) + fg * fgColor[k] * m + noise * rng.normal();
        out[base + k] = Math.round(Math.min(1, Math.max(0, v)) * 255);
      }
    }
  }
}

/**
 * Generates the synthetic dataset: `size` images [imageSize, imageSize, channels] of 10
 * balanced classes (label of image i is i mod 10). Same options -> same bytes; image i
 * depends only on (seed, split, i), so a smaller dataset is a prefix of a larger one.
 */
export function syntheticDataset(options: SyntheticOptions): ImageDataset {
  const split = options.split;
  if (split !== 'train' && split !== 'test') throw invalidValue('split', split, "'train' or 'test'");
  const seed = options.seed ?? 0;
  const size = options.size ?? (split === 'train' ? 2048 : 512);
  const imageSize = options.imageSize ?? 16;
  const channels = options.channels ?? 1;
  if (!Number.isInteger(seed)) throw invalidValue('seed', seed, 'an integer');
  if (!Number.isInteger(size) || size < 1) throw invalidValue('size', size, 'a positive integer');
  if (!Number.isInteger(imageSize) || imageSize < 8 || imageSize > 512) {
    throw invalidValue('imageSize', imageSize, 'an integer in 8..512');
  }
  if (channels !== 1 && channels !== 3) throw invalidValue('channels', channels, '1 or 3');
  const numClasses = SYNTHETIC_CLASS_NAMES.length;
  const imageBytes = imageSize * imageSize * channels;
  const pixels = allocPixels(size * imageBytes);
  const labels = new Int32Array(size);
  const splitId = split === 'train' ? 0 : 1;
  for (let i = 0; i < size; i++) {
    const label = i % numClasses;
    labels[i] = label;
    drawImage(pixels, i * imageBytes, imageSize, channels, label, Rng.keyed(seed, SYNTHETIC_TAG, splitId, i));
  }
  return createDataset({
    name: 'synthetic',
    length: size,
    height: imageSize,
    width: imageSize,
    channels,
    numClasses,
    classNames: SYNTHETIC_CLASS_NAMES,
    labels,
    pixels,
  });
}

/**
 * Bicubic resizing as a linear map, exactly PyTorch's
 * `F.interpolate(mode='bicubic', align_corners=False)` (no antialiasing): Keys' cubic
 * convolution with A = -0.75, source coordinate `(o + 0.5) · in/out - 0.5`, taps clamped to the
 * border. Built from ordinary tfjs ops (two matrix products), so gradients reach the input.
 */
import { tf, type Tensor } from './tf.js';

const CUBIC_A = -0.75;

/** Keys' cubic kernel for |t| <= 1. */
function near(t: number): number {
  return ((CUBIC_A + 2) * t - (CUBIC_A + 3)) * t * t + 1;
}

/** Keys' cubic kernel for 1 < |t| < 2. */
function far(t: number): number {
  return ((CUBIC_A * t - 5 * CUBIC_A) * t + 8 * CUBIC_A) * t - 4 * CUBIC_A;
}

/**
 * The `[outSize, inSize]` matrix of 1-D bicubic resizing from `inSize` to `outSize` samples
 * (rows sum to 1; the identity when the sizes are equal).
 */
export function bicubicMatrix(inSize: number, outSize: number): Float32Array {
  const m = new Float32Array(outSize * inSize);
  const scale = inSize / outSize;
  for (let o = 0; o < outSize; o++) {
    const source = (o + 0.5) * scale - 0.5;
    const base = Math.floor(source);
    const t = source - base;
    const weights = [far(t + 1), near(t), near(1 - t), far(2 - t)];
    weights.forEach((w, tap) => {
      const i = Math.min(Math.max(base - 1 + tap, 0), inSize - 1);
      m[o * inSize + i] += w;
    });
  }
  return m;
}

/**
 * Resizes a grid of feature vectors bicubically: `[H, W, C] -> [outH, outW, C]`,
 * differentiable with respect to `grid`.
 */
export function resizeBicubic(grid: Tensor, outH: number, outW: number): Tensor {
  if (grid.rank !== 3) throw new Error(`resizeBicubic expects [H, W, C], got shape [${grid.shape}]`);
  const [h, w, c] = grid.shape;
  if (h === outH && w === outW) return tf.clone(grid);
  return tf.tidy(() => {
    const rows = tf.tensor2d(bicubicMatrix(h, outH), [outH, h]);
    const cols = tf.tensor2d(bicubicMatrix(w, outW), [outW, w]);
    // Along H: [outH, H] x [H, W·C]; then along W: [outW, W] x [W, outH·C] on the transposed grid.
    const alongH = tf.reshape(tf.matMul(rows, tf.reshape(grid, [h, w * c])), [outH, w, c]);
    const wFirst = tf.reshape(tf.transpose(alongH, [1, 0, 2]), [w, outH * c]);
    const alongW = tf.reshape(tf.matMul(cols, wFirst), [outW, outH, c]);
    return tf.transpose(alongW, [1, 0, 2]);
  });
}

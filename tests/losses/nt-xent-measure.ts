/** Value, gradients and the memory profile of an NT-Xent loss, for its tests. */
import { tf, type Tensor } from '../../src/core/tf.js';

export type Loss = (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Scalar;

/** Loss value and gradients w.r.t. z1, z2 as plain arrays. */
export function valueAndGrads(f: Loss, z1: tf.Tensor2D, z2: tf.Tensor2D): { value: number; g1: Float32Array; g2: Float32Array } {
  const { value, grads } = tf.valueAndGrads((a: Tensor, b: Tensor) => f(a as tf.Tensor2D, b as tf.Tensor2D))([z1, z2]);
  const out = {
    value: value.dataSync()[0]!,
    g1: grads[0]!.dataSync() as Float32Array,
    g2: grads[1]!.dataSync() as Float32Array,
  };
  tf.dispose([value, ...grads]);
  return out;
}

/** Bytes of the largest tensor any kernel of `fn` output, and the peak total bytes above the start. */
export async function measure(fn: () => void): Promise<{ peakAbove: number; largestOutput: number; shapes: number[][] }> {
  const start = tf.memory().numBytes;
  const profile = await tf.profile(() => {
    fn();
  });
  let largest = 0;
  const shapes: number[][] = [];
  for (const k of profile.kernels) {
    for (const shape of k.outputShapes) {
      const size = shape.reduce((p, d) => p * d, 1);
      if (size * 4 > largest) largest = size * 4;
      shapes.push(shape);
    }
  }
  return { peakAbove: profile.peakBytes - start, largestOutput: largest, shapes };
}

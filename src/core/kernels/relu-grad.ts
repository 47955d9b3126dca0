/**
 * ReLU's gradient in one pass. tfjs differentiates `Relu` as `mul(dy, cast(step(x)))`:
 * two passes over the activation and an extra temporary. While the native kernels are
 * installed, the `Relu` gradient runs the `SslZooReluGrad` kernel instead, which computes
 * the same values (NaN where x is NaN, `0 * dy` where x <= 0, `dy` elsewhere).
 */
import { tf, type Tensor } from '../tf.js';
import { f32, outputArray, type DnnlAddon, type NativeKernel } from './common.js';

export const RELU_GRAD = 'SslZooReluGrad';

interface BinaryAddon {
  binary(op: number, a: Float32Array, b: Float32Array, out: Float32Array, shape: Int32Array, aStrides: Int32Array, bStrides: Int32Array): void;
}

const RELU_GRAD_OP = 7; // kReluGrad in native/dnnl/src/elementwise.h

/** `SslZooReluGrad`: inputs `dy`, `x` (same shape, float32) -> `dy * step(x)`. */
export const reluGradKernel: NativeKernel = {
  kernelName: RELU_GRAD,
  func: ({ inputs, backend }, addon: DnnlAddon) => {
    const { dy, x } = inputs;
    const dyVals = f32(backend, dy);
    const xVals = f32(backend, x);
    if (dy == null || x == null || dyVals == null || xVals == null || dyVals.length !== xVals.length) {
      throw new Error(`${RELU_GRAD}: dy and x must be float32 tensors of the same size`);
    }
    const n = xVals.length;
    const out = outputArray(n);
    if (n > 0) {
      const one = Int32Array.of(1);
      (addon as unknown as BinaryAddon).binary(RELU_GRAD_OP, dyVals, xVals, out, Int32Array.of(n), one, one);
    }
    return backend.makeTensorInfo(x.shape.slice(), 'float32', out);
  },
};

let original: tf.GradConfig | undefined;

/** Routes the `Relu` gradient through {@link RELU_GRAD} (when registered for the backend in use). */
export function overrideReluGradient(): void {
  if (original !== undefined) return;
  const current = tf.getGradient('Relu');
  if (current == null) return; // gradients not registered: nothing to speed up
  original = current;
  tf.registerGradient({
    kernelName: 'Relu',
    inputsToSave: ['x'],
    gradFunc: (dy, saved) => {
      const [x] = saved;
      const g = dy as Tensor;
      const fused = g.dtype === 'float32' && x.dtype === 'float32' && tf.getKernel(RELU_GRAD, tf.getBackend()) != null && g.size === x.size;
      return {
        x: () => (fused ? (tf.engine().runKernel(RELU_GRAD, { dy: g, x }) as Tensor) : tf.mul(g, tf.cast(tf.step(x), 'float32'))),
      };
    },
  });
}

/** Puts tfjs's own `Relu` gradient back. */
export function restoreReluGradient(): void {
  if (original === undefined) return;
  tf.registerGradient(original);
  original = undefined;
}

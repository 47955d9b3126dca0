/**
 * GELU (exact erf form) in one pass each way. Composed of tfjs ops, `x · 0.5 (1 + erf(x / √2))`
 * takes five passes forward and its gradient several more. While the native kernels are
 * installed, {@link gelu} runs `SslZooGelu` forward and `SslZooGeluGrad` backward, which compute
 * the same function and gradient `dy · (Φ(x) + x φ(x))` elementwise in float32 (call-free erf
 * and exp approximations within a few ulp, so the loops vectorise).
 */
import { tf, type Tensor } from '../tf.js';
import { f32, outputArray, type DnnlAddon, type NativeKernel } from './common.js';

export const GELU_FORWARD = 'SslZooGelu';
export const GELU_GRAD = 'SslZooGeluGrad';

interface ElementwiseAddon {
  unary(op: number, x: Float32Array, out: Float32Array, alpha: number): void;
  binary(op: number, a: Float32Array, b: Float32Array, out: Float32Array, shape: Int32Array, aStrides: Int32Array, bStrides: Int32Array): void;
}

const GELU_OP = 14; // kGelu (UnaryOp) in native/dnnl/src/elementwise.h
const GELU_GRAD_OP = 8; // kGeluGrad (BinaryOp)

/** `SslZooGelu`: input `x` (float32) -> `x Φ(x)`, same shape. */
const geluKernel: NativeKernel = {
  kernelName: GELU_FORWARD,
  func: ({ inputs, backend }, addon: DnnlAddon) => {
    const xVals = f32(backend, inputs.x);
    if (inputs.x == null || xVals == null) throw new Error(`${GELU_FORWARD}: x must be a float32 tensor`);
    const out = outputArray(xVals.length);
    if (xVals.length > 0) (addon as unknown as ElementwiseAddon).unary(GELU_OP, xVals, out, 0);
    return backend.makeTensorInfo(inputs.x.shape.slice(), 'float32', out);
  },
};

/** `SslZooGeluGrad`: inputs `dy`, `x` (same size, float32) -> `dy (Φ(x) + x φ(x))`. */
const geluGradKernel: NativeKernel = {
  kernelName: GELU_GRAD,
  func: ({ inputs, backend }, addon: DnnlAddon) => {
    const { dy, x } = inputs;
    const dyVals = f32(backend, dy);
    const xVals = f32(backend, x);
    if (dy == null || x == null || dyVals == null || xVals == null || dyVals.length !== xVals.length) {
      throw new Error(`${GELU_GRAD}: dy and x must be float32 tensors of the same size`);
    }
    const n = xVals.length;
    const out = outputArray(n);
    if (n > 0) {
      const one = Int32Array.of(1);
      (addon as unknown as ElementwiseAddon).binary(GELU_GRAD_OP, dyVals, xVals, out, Int32Array.of(n), one, one);
    }
    return backend.makeTensorInfo(x.shape.slice(), 'float32', out);
  },
};

export const geluKernels: NativeKernel[] = [geluKernel, geluGradKernel];

/** The composed form with its gradient written out (keeps x and Φ(x) for the backward pass). */
function composedGelu(x: Tensor): Tensor {
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const [xs, save] = args as [Tensor, tf.GradSaveFunc];
    const cdf = tf.tidy(() => tf.mul(tf.add(tf.erf(tf.mul(xs, Math.SQRT1_2)), 1), 0.5));
    save([xs, cdf]);
    return {
      value: tf.mul(xs, cdf),
      gradFunc: (dy, [saved, phi]) =>
        tf.tidy(() => {
          const density = tf.mul(tf.exp(tf.mul(tf.square(saved!), -0.5)), 1 / Math.sqrt(2 * Math.PI));
          return tf.mul(dy as Tensor, tf.add(phi!, tf.mul(saved!, density)));
        }),
    };
  });
  return op(x);
}

/** The native kernels, x kept for the backward pass. */
function nativeGelu(x: Tensor): Tensor {
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const [xs, save] = args as [Tensor, tf.GradSaveFunc];
    save([xs]);
    return {
      value: tf.engine().runKernel(GELU_FORWARD, { x: xs }) as Tensor,
      gradFunc: (dy, [saved]) => tf.engine().runKernel(GELU_GRAD, { dy: dy as Tensor, x: saved! }) as Tensor,
    };
  });
  return op(x);
}

/** GELU `x Φ(x)` (exact erf form), any shape to the same shape: native kernels when installed, else tfjs ops. */
export function gelu(x: Tensor): Tensor {
  const native = x.dtype === 'float32' && tf.getBackend() === 'cpu' && tf.getKernel(GELU_FORWARD, 'cpu') != null && tf.getKernel(GELU_GRAD, 'cpu') != null;
  return native ? nativeGelu(x) : composedGelu(x);
}

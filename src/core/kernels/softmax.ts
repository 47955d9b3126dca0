/**
 * Softmax over the last axis in one pass each way. Composed of tfjs ops it takes max, subtract,
 * exp, sum and divide forward and three more passes backward (tfjs's own Softmax kernel is pure
 * JS). While the native kernels are installed, {@link softmaxLastAxis} runs `SslZooSoftmax`
 * forward and `SslZooSoftmaxGrad` backward, which compute the same function and gradient per row.
 */
import { tf, type Tensor } from '../tf.js';
import { f32, outputArray, type DnnlAddon, type NativeKernel } from './common.js';

export const SOFTMAX_FORWARD = 'SslZooSoftmax';
export const SOFTMAX_GRAD = 'SslZooSoftmaxGrad';

interface SoftmaxAddon {
  softmax(x: Float32Array, out: Float32Array, rows: number, n: number): void;
  softmaxGrad(y: Float32Array, dy: Float32Array, out: Float32Array, rows: number, n: number): void;
}

/** `SslZooSoftmax`: input `x` `[..., n]` (float32) -> `exp(x - max) / Σ exp(x - max)` per row, same shape. */
const softmaxKernel: NativeKernel = {
  kernelName: SOFTMAX_FORWARD,
  func: ({ inputs, backend }, addon: DnnlAddon) => {
    const xVals = f32(backend, inputs.x);
    if (inputs.x == null || xVals == null) throw new Error(`${SOFTMAX_FORWARD}: x must be a float32 tensor`);
    const shape = inputs.x.shape;
    const n = shape[shape.length - 1] ?? 1;
    const out = outputArray(xVals.length);
    if (xVals.length > 0) (addon as unknown as SoftmaxAddon).softmax(xVals, out, xVals.length / n, n);
    return backend.makeTensorInfo(shape.slice(), 'float32', out);
  },
};

/** `SslZooSoftmaxGrad`: inputs `y` (the forward output), `dy`, both `[..., n]` float32 -> `y (dy - Σ dy y)` per row. */
const softmaxGradKernel: NativeKernel = {
  kernelName: SOFTMAX_GRAD,
  func: ({ inputs, backend }, addon: DnnlAddon) => {
    const { y, dy } = inputs;
    const yVals = f32(backend, y);
    const dyVals = f32(backend, dy);
    if (y == null || dy == null || yVals == null || dyVals == null || yVals.length !== dyVals.length) {
      throw new Error(`${SOFTMAX_GRAD}: y and dy must be float32 tensors of the same size`);
    }
    const n = y.shape[y.shape.length - 1] ?? 1;
    const out = outputArray(yVals.length);
    if (yVals.length > 0) (addon as unknown as SoftmaxAddon).softmaxGrad(yVals, dyVals, out, yVals.length / n, n);
    return backend.makeTensorInfo(y.shape.slice(), 'float32', out);
  },
};

export const softmaxKernels: NativeKernel[] = [softmaxKernel, softmaxGradKernel];

/** The composed form, with the gradient `y ⊙ (dy − Σ dy ⊙ y)` from the saved output alone. */
function composedSoftmax(x: Tensor): Tensor {
  const softmax = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const [logits, save] = args as [Tensor, tf.GradSaveFunc];
    const y = tf.tidy(() => {
      const e = tf.exp(tf.sub(logits, tf.max(logits, -1, true)));
      return tf.div(e, tf.sum(e, -1, true));
    });
    save([y]);
    return { value: y, gradFunc: (dy, [saved]) => tf.tidy(() => tf.mul(saved!, tf.sub(dy as Tensor, tf.sum(tf.mul(dy as Tensor, saved!), -1, true)))) };
  });
  return softmax(x);
}

/** The native kernels, the output kept for the backward pass. */
function nativeSoftmax(x: Tensor): Tensor {
  const softmax = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const [logits, save] = args as [Tensor, tf.GradSaveFunc];
    const y = tf.engine().runKernel(SOFTMAX_FORWARD, { x: logits }) as Tensor;
    save([y]);
    return { value: y, gradFunc: (dy, [saved]) => tf.engine().runKernel(SOFTMAX_GRAD, { y: saved!, dy: dy as Tensor }) as Tensor };
  });
  return softmax(x);
}

/** Softmax over the last axis, any shape to the same shape: native kernels when installed, else tfjs ops. */
export function softmaxLastAxis(x: Tensor): Tensor {
  const native =
    x.dtype === 'float32' &&
    x.rank > 0 &&
    tf.getBackend() === 'cpu' &&
    tf.getKernel(SOFTMAX_FORWARD, 'cpu') != null &&
    tf.getKernel(SOFTMAX_GRAD, 'cpu') != null;
  return native ? nativeSoftmax(x) : composedSoftmax(x);
}

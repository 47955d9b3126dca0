/**
 * Fused training-mode batch normalisation.
 *
 * tfjs builds a training batch norm from `tf.moments` + `tf.batchNorm`; its forward and
 * backward passes then run about 30 element-wise kernels over the activation. The two
 * kernels here do it in two passes each way (statistics, then normalise; gradient sums,
 * then dx), as PyTorch does:
 *
 * - `SslZooBatchNormTrain`: inputs `x` `[..., C]`, `scale`, `offset` `[C]`; attribute
 *   `varianceEpsilon`; outputs `y` `[..., C]`, batch `mean` and biased `variance` `[C]`.
 * - `SslZooBatchNormTrainGrad`: its gradient with respect to `x`, `scale` and `offset`
 *   (including what flows back through the `mean` and `variance` outputs).
 *
 * They are registered on the `cpu` backend with the native kernels and on the `webgpu`
 * backend in WGSL (./webgpu/batch-norm.ts); {@link batchNormTraining} uses them when they
 * are registered for the current backend, and otherwise the tfjs composition, with the same
 * results.
 */
import { tf, type Tensor } from '../tf.js';
import { f32, outputArray, registerGradientOnce, type DnnlAddon, type KernelArgs, type NativeKernel } from './common.js';

export const BATCH_NORM_TRAIN = 'SslZooBatchNormTrain';
export const BATCH_NORM_TRAIN_GRAD = 'SslZooBatchNormTrainGrad';

interface BnAddon {
  bnTrain(
    x: Float32Array,
    y: Float32Array,
    channels: number,
    scale: Float32Array | null,
    offset: Float32Array | null,
    eps: number,
    mean: Float32Array,
    variance: Float32Array,
  ): void;
  bnTrainGrad(
    dy: Float32Array,
    x: Float32Array,
    channels: number,
    scale: Float32Array | null,
    mean: Float32Array,
    variance: Float32Array,
    dmean: Float32Array | null,
    dvariance: Float32Array | null,
    eps: number,
    dx: Float32Array,
    dscale: Float32Array,
    doffset: Float32Array,
  ): void;
}

function values(args: KernelArgs, name: string): Float32Array | null {
  const t = args.inputs[name];
  if (t == null) return null;
  const v = f32(args.backend, t);
  if (v == null) throw new Error(`${BATCH_NORM_TRAIN}: input '${name}' must be a float32 tensor`);
  return v;
}

function epsilon(args: KernelArgs): number {
  const eps = args.attrs?.varianceEpsilon;
  return typeof eps === 'number' ? eps : 1e-5;
}

function channelsOf(args: KernelArgs): [number, number] {
  const x = args.inputs.x;
  if (x == null || x.shape.length < 1) throw new Error(`${BATCH_NORM_TRAIN}: missing input x`);
  const channels = x.shape[x.shape.length - 1];
  const size = x.shape.reduce((a, b) => a * b, 1);
  if (channels <= 0 || size === 0) throw new Error(`${BATCH_NORM_TRAIN}: empty input`);
  return [channels, size / channels];
}

const forward: NativeKernel = {
  kernelName: BATCH_NORM_TRAIN,
  func: (args, addon: DnnlAddon) => {
    const [channels] = channelsOf(args);
    const x = values(args, 'x') as Float32Array;
    const y = outputArray(x.length);
    const mean = new Float32Array(channels);
    const variance = new Float32Array(channels);
    (addon as unknown as BnAddon).bnTrain(x, y, channels, values(args, 'scale'), values(args, 'offset'), epsilon(args), mean, variance);
    const { backend } = args;
    return [
      backend.makeTensorInfo(args.inputs.x!.shape.slice(), 'float32', y),
      backend.makeTensorInfo([channels], 'float32', mean),
      backend.makeTensorInfo([channels], 'float32', variance),
    ];
  },
};

const backward: NativeKernel = {
  kernelName: BATCH_NORM_TRAIN_GRAD,
  func: (args, addon: DnnlAddon) => {
    const [channels] = channelsOf(args);
    const x = values(args, 'x') as Float32Array;
    const dy = values(args, 'dy') as Float32Array;
    const dx = outputArray(x.length);
    const dscale = new Float32Array(channels);
    const doffset = new Float32Array(channels);
    (addon as unknown as BnAddon).bnTrainGrad(
      dy,
      x,
      channels,
      values(args, 'scale'),
      values(args, 'mean') as Float32Array,
      values(args, 'variance') as Float32Array,
      values(args, 'dmean'),
      values(args, 'dvariance'),
      epsilon(args),
      dx,
      dscale,
      doffset,
    );
    const { backend } = args;
    return [
      backend.makeTensorInfo(args.inputs.x!.shape.slice(), 'float32', dx),
      backend.makeTensorInfo([channels], 'float32', dscale),
      backend.makeTensorInfo([channels], 'float32', doffset),
    ];
  },
};

/** Kernels with no tfjs counterpart: registered with the native kernels, removed with them. */
export const batchNormKernels: NativeKernel[] = [forward, backward];

/** The gradient in tfjs ops, for when the native gradient kernel has been unregistered meanwhile. */
function compositeGrad(dy: Tensor, x: Tensor, scale: Tensor, mean: Tensor, variance: Tensor, dmean: Tensor, dvariance: Tensor, eps: number): Tensor[] {
  const axes = x.shape.slice(0, -1).map((_, i) => i);
  const m = x.size / x.shape[x.shape.length - 1];
  const invstd = tf.rsqrt(tf.add(variance, eps));
  const xmu = tf.sub(x, mean);
  const sdy = tf.sum(dy, axes);
  const sdyx = tf.sum(tf.mul(dy, xmu), axes);
  const k1 = tf.mul(scale, invstd);
  const k2 = tf.add(tf.mul(tf.neg(tf.mul(k1, tf.square(invstd))), tf.div(sdyx, m)), tf.mul(dvariance, 2 / m));
  const k3 = tf.add(tf.mul(tf.neg(k1), tf.div(sdy, m)), tf.div(dmean, m));
  const dx = tf.add(tf.add(tf.mul(dy, k1), tf.mul(xmu, k2)), k3);
  return [dx, tf.mul(sdyx, invstd), sdy];
}

/** Registers the gradient of `SslZooBatchNormTrain` (once per process). */
export function registerBatchNormGradient(): void {
  registerGradientOnce({
    kernelName: BATCH_NORM_TRAIN,
    inputsToSave: ['x', 'scale'],
    outputsToSave: [false, true, true],
    gradFunc: (dys, saved, attrs) => {
      const [dy, dmean, dvariance] = dys as Tensor[];
      const [x, scale, mean, variance] = saved;
      const eps = typeof attrs?.varianceEpsilon === 'number' ? attrs.varianceEpsilon : 1e-5;
      const grads =
        tf.getKernel(BATCH_NORM_TRAIN_GRAD, tf.getBackend()) != null
          ? (tf.engine().runKernel(BATCH_NORM_TRAIN_GRAD, { dy, x, scale, mean, variance, dmean, dvariance }, { varianceEpsilon: eps }) as Tensor[])
          : compositeGrad(dy, x, scale, mean, variance, dmean, dvariance, eps);
      return { x: () => grads[0], scale: () => grads[1], offset: () => grads[2] };
    },
  });
}

/** Training-mode batch norm result. */
export interface BatchNormTrainingResult {
  /** Normalised, scaled and shifted input, same shape as `x`. */
  y: Tensor;
  /** Batch mean per channel, `[C]`. */
  mean: Tensor;
  /** Biased batch variance per channel, `[C]`. */
  variance: Tensor;
}

/**
 * Training-mode batch normalisation over every axis but the last:
 * `y = (x - mean) / sqrt(variance + eps) * scale + offset`, with the batch `mean` and
 * biased `variance` `[C]` of `x` `[..., C]` (also returned, e.g. for running statistics).
 * Differentiable with respect to `x`, `scale` and `offset` (the true batch-norm gradient,
 * through the statistics), and with respect to `x` through `mean` and `variance`.
 *
 * Runs the fused kernels when they are installed for the current backend (native on `cpu`,
 * WGSL on `webgpu`: two passes forward, two backward); otherwise `tf.moments` +
 * `tf.batchNorm`, the same function.
 * Missing `scale` / `offset` mean 1 / 0.
 */
export function batchNormTraining(x: Tensor, scale: Tensor | undefined, offset: Tensor | undefined, eps: number): BatchNormTrainingResult {
  if (x.rank < 1) throw new Error(`batchNormTraining expects [..., C], got a scalar`);
  const channels = x.shape[x.rank - 1];
  const scaleT = scale ?? tf.ones([channels]);
  const offsetT = offset ?? tf.zeros([channels]);
  const fused = x.dtype === 'float32' && tf.getKernel(BATCH_NORM_TRAIN, tf.getBackend()) != null && scaleT.size === channels && offsetT.size === channels;
  if (fused) {
    // The kernel is only registered by installNativeKernels (cpu) and installWebGpuKernels
    // (webgpu), which register its gradient too.
    const [y, mean, variance] = tf
      .engine()
      .runKernel(BATCH_NORM_TRAIN, { x, scale: tf.reshape(scaleT, [channels]), offset: tf.reshape(offsetT, [channels]) }, { varianceEpsilon: eps }) as Tensor[];
    return { y, mean, variance };
  }
  const axes = x.shape.slice(0, -1).map((_, i) => i);
  const { mean, variance } = tf.moments(x, axes);
  const y = tf.batchNorm(x, mean as tf.Tensor1D, variance as tf.Tensor1D, offsetT as tf.Tensor1D, scaleT as tf.Tensor1D, eps);
  return { y, mean, variance };
}

/**
 * Fused group normalisation (also layer normalisation, its one-group case).
 *
 * As a tfjs composition (reshape, `tf.moments`, normalise, scale, shift) group norm runs
 * about 20 element-wise and reduction kernels forward and more backward, several of them
 * over transposed copies. The two kernels here make one pass for the statistics and one for
 * the output, and two for the gradient:
 *
 * - `SslZooGroupNorm`: inputs `x` `[B, ..., C]`, `scale`, `offset` `[C]`; attributes
 *   `groups` (G, dividing C) and `varianceEpsilon`; outputs `y` (shape of `x`) and, per
 *   sample and group, `mean` and `rstd` = 1 / sqrt(biased variance + eps) `[B, G]`.
 * - `SslZooGroupNormGrad`: the gradient of `y` with respect to `x`, `scale` and `offset`
 *   (`mean` and `rstd` are saved for it, not differentiable outputs).
 *
 * They are registered on the `cpu` backend with the native kernels; {@link groupNorm} uses
 * them when they are, and otherwise the tfjs composition, the same function.
 */
import { tf, type Tensor } from '../tf.js';
import { f32, outputArray, registerGradientOnce, type DnnlAddon, type KernelArgs, type NativeKernel } from './common.js';

export const GROUP_NORM = 'SslZooGroupNorm';
export const GROUP_NORM_GRAD = 'SslZooGroupNormGrad';

interface GnAddon {
  gnTrain(
    x: Float32Array,
    y: Float32Array,
    batch: number,
    channels: number,
    groups: number,
    scale: Float32Array | null,
    offset: Float32Array | null,
    eps: number,
    mean: Float32Array,
    rstd: Float32Array,
  ): void;
  gnTrainGrad(
    dy: Float32Array,
    x: Float32Array,
    batch: number,
    channels: number,
    groups: number,
    scale: Float32Array | null,
    mean: Float32Array,
    rstd: Float32Array,
    dx: Float32Array,
    dscale: Float32Array,
    doffset: Float32Array,
  ): void;
}

interface GroupAttrs {
  groups: number;
  eps: number;
}

function attrsOf(args: KernelArgs): GroupAttrs {
  const groups = args.attrs?.groups;
  const eps = args.attrs?.varianceEpsilon;
  if (typeof groups !== 'number' || typeof eps !== 'number') throw new Error(`${GROUP_NORM}: missing attributes`);
  return { groups, eps };
}

function input(args: KernelArgs, name: string): Float32Array {
  const v = f32(args.backend, args.inputs[name]);
  if (v == null) throw new Error(`${GROUP_NORM}: input '${name}' must be a float32 tensor`);
  return v;
}

/** `[batch, channels]` of `x` `[B, ..., C]`. */
function dims(args: KernelArgs): [number, number] {
  const shape = args.inputs.x?.shape;
  if (shape == null || shape.length < 2) throw new Error(`${GROUP_NORM}: x must be [B, ..., C]`);
  return [shape[0], shape[shape.length - 1]];
}

const forward: NativeKernel = {
  kernelName: GROUP_NORM,
  func: (args, addon: DnnlAddon) => {
    const [batch, channels] = dims(args);
    const { groups, eps } = attrsOf(args);
    const x = input(args, 'x');
    const y = outputArray(x.length);
    const mean = new Float32Array(batch * groups);
    const rstd = new Float32Array(batch * groups);
    (addon as unknown as GnAddon).gnTrain(x, y, batch, channels, groups, input(args, 'scale'), input(args, 'offset'), eps, mean, rstd);
    const { backend } = args;
    return [
      backend.makeTensorInfo(args.inputs.x!.shape.slice(), 'float32', y),
      backend.makeTensorInfo([batch, groups], 'float32', mean),
      backend.makeTensorInfo([batch, groups], 'float32', rstd),
    ];
  },
};

const backward: NativeKernel = {
  kernelName: GROUP_NORM_GRAD,
  func: (args, addon: DnnlAddon) => {
    const [batch, channels] = dims(args);
    const { groups } = attrsOf(args);
    const x = input(args, 'x');
    const dx = outputArray(x.length);
    const dscale = new Float32Array(channels);
    const doffset = new Float32Array(channels);
    (addon as unknown as GnAddon).gnTrainGrad(
      input(args, 'dy'),
      x,
      batch,
      channels,
      groups,
      input(args, 'scale'),
      input(args, 'mean'),
      input(args, 'rstd'),
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
export const groupNormKernels: NativeKernel[] = [forward, backward];

/**
 * The gradient in tfjs ops (for when the native gradient kernel was removed after the forward
 * ran): with x̂ = (x − mean)·rstd and dx̂ = dy·scale, per sample and group
 * `dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ · x̂))`; `dscale = Σ dy·x̂`, `doffset = Σ dy`.
 */
function compositeGrad(dy: Tensor, x: Tensor, scale: Tensor, mean: Tensor, rstd: Tensor, groups: number): Tensor[] {
  const [batch, channels] = [x.shape[0], x.shape[x.rank - 1]];
  const grouped = [batch, -1, groups, channels / groups];
  const xhat = tf.mul(tf.sub(tf.reshape(x, grouped), tf.reshape(mean, [batch, 1, groups, 1])), tf.reshape(rstd, [batch, 1, groups, 1]));
  const dyg = tf.reshape(dy, grouped);
  const dxhat = tf.mul(dyg, tf.reshape(scale, [1, 1, groups, channels / groups]));
  const centred = tf.sub(dxhat, tf.mean(dxhat, [1, 3], true));
  const dx = tf.mul(tf.reshape(rstd, [batch, 1, groups, 1]), tf.sub(centred, tf.mul(xhat, tf.mean(tf.mul(dxhat, xhat), [1, 3], true))));
  const dscale = tf.reshape(tf.sum(tf.mul(dyg, xhat), [0, 1]), [channels]);
  const doffset = tf.reshape(tf.sum(dyg, [0, 1]), [channels]);
  return [tf.reshape(dx, x.shape), dscale, doffset];
}

/** Registers the gradient of `SslZooGroupNorm` (once per process). */
export function registerGroupNormGradient(): void {
  registerGradientOnce({
    kernelName: GROUP_NORM,
    inputsToSave: ['x', 'scale'],
    outputsToSave: [false, true, true],
    gradFunc: (dys, saved, attrs) => {
      const dy = (dys as Tensor[])[0]!;
      const [x, scale, mean, rstd] = saved;
      const groups = attrs.groups as number;
      const grads =
        tf.getKernel(GROUP_NORM_GRAD, tf.getBackend()) != null
          ? (tf.engine().runKernel(GROUP_NORM_GRAD, { dy, x, scale, mean, rstd }, { groups, varianceEpsilon: attrs.varianceEpsilon }) as Tensor[])
          : compositeGrad(dy, x, scale, mean, rstd, groups);
      return { x: () => grads[0], scale: () => grads[1], offset: () => grads[2] };
    },
  });
}

/**
 * Group normalisation of `x` `[B, ..., C]` (channels last, rank ≥ 2) with `groups` groups
 * (dividing C): each sample's channels are split into `groups` consecutive groups, each
 * normalised by its own mean and biased variance over the group's channels and every
 * position, `(x − mean) / sqrt(var + eps)`, then `· scale + offset` per channel `[C]`
 * (missing: 1 and 0). Same shape out. Differentiable with respect to `x`, `scale`, `offset`.
 *
 * Runs the fused native kernels when they are installed on the `cpu` backend; otherwise the
 * tfjs composition (reshape to `[B, S, G, C/G]`, `tf.moments` over axes 1 and 3).
 */
export function groupNorm(x: Tensor, groups: number, scale: Tensor | undefined, offset: Tensor | undefined, eps: number): Tensor {
  if (x.rank < 2) throw new Error(`groupNorm expects [B, ..., C], got shape [${x.shape}]`);
  const channels = x.shape[x.rank - 1];
  if (!(Number.isInteger(groups) && groups >= 1 && channels % groups === 0)) {
    throw new Error(`groupNorm: ${groups} groups do not divide ${channels} channels`);
  }
  const fused = x.dtype === 'float32' && x.size > 0 && tf.getBackend() === 'cpu' && tf.getKernel(GROUP_NORM, 'cpu') != null;
  return tf.tidy(() => {
    if (fused) {
      // The kernel is only registered by installNativeKernels, which registers its gradient too.
      const [y] = tf
        .engine()
        .runKernel(
          GROUP_NORM,
          { x, scale: scale ?? tf.ones([channels]), offset: offset ?? tf.zeros([channels]) },
          { groups, varianceEpsilon: eps },
        ) as Tensor[];
      return y; // tidy disposes mean and rstd; the gradient tape keeps its own copies
    }
    const grouped = tf.reshape(x, [x.shape[0], -1, groups, channels / groups]);
    const { mean, variance } = tf.moments(grouped, [1, 3], true);
    const normalised = tf.reshape(tf.mul(tf.sub(grouped, mean), tf.rsqrt(tf.add(variance, eps))), x.shape);
    const scaled = scale ? tf.mul(normalised, scale) : normalised;
    return offset ? tf.add(scaled, offset) : scaled;
  });
}

/**
 * Training-mode batch normalisation on the webgpu backend, in WGSL: the same contract as
 * the native cpu kernels of ../batch-norm.ts, in two passes each way.
 *
 * - `SslZooBatchNormTrain`: `x` `[..., C]`, optional `scale`, `offset` `[C]`, attribute
 *   `varianceEpsilon` -> `y` `[..., C]`, batch `mean` `[C]`, biased `variance` `[C]`.
 *   Pass 1: one workgroup per channel reduces its `M = size / C` values (the mean, then
 *   the squared deviations from it: two-pass, no cancellation). Pass 2: element-wise `y`.
 * - `SslZooBatchNormTrainGrad`: `dy`, `x` `[..., C]`, optional `scale`, `mean`,
 *   `variance` `[C]`, optional `dmean`, `dvariance` `[C]` -> `dx` `[..., C]`, `dscale`,
 *   `doffset` `[C]`. Pass 1: per channel `dscale = invstd·Σ dy·(x − mean)`,
 *   `doffset = Σ dy` and the coefficients of `dx`: `k1 = scale·invstd`,
 *   `k2 = −k1·invstd·dscale/M + 2·dvariance/M`, `k3 = −k1·doffset/M + dmean/M`. Pass 2:
 *   element-wise `dx = dy·k1 + (x − mean)·k2 + k3`. (Two programs of at most 8 buffers: the
 *   limit of storage buffers per shader stage WebGPU guarantees.)
 */
import { BATCH_NORM_TRAIN, BATCH_NORM_TRAIN_GRAD } from '../batch-norm.js';
import { tf } from '../../tf.js';
import { ELEMENTWISE_WORKGROUP, elementwiseDispatch, REDUCE_WORKGROUP, type UniformValue, type WebGpuKernelArgs, type WgslProgram } from './program.js';

type TensorInfo = tf.TensorInfo;

/** WGSL: the sum of `value` over the workgroup's invocations (call in uniform control flow). */
const WORKGROUP_SUM = `
  var<workgroup> partial : array<f32, ${REDUCE_WORKGROUP}>;
  fn workgroupSum(value : f32) -> f32 {
    partial[localId.x] = value;
    workgroupBarrier();
    for (var stride = ${REDUCE_WORKGROUP / 2}u; stride > 0u; stride = stride / 2u) {
      if (localId.x < stride) {
        partial[localId.x] = partial[localId.x] + partial[localId.x + stride];
      }
      workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
  }`;

/** Per-channel reduction over the `rows` of a `[rows, channels]` view: output `[outRows, channels]`. */
function channelReduction(shaderKey: string, variableNames: string[], outRows: number, channels: number, body: string): WgslProgram {
  return {
    variableNames,
    outputShape: [outRows, channels],
    shaderKey,
    dispatchLayout: { x: [1] },
    dispatch: [channels, 1, 1],
    workgroupSize: [REDUCE_WORKGROUP, 1, 1],
    uniforms: 'channels : i32, rows : i32, eps : f32,',
    getUserCode: () => `
      ${WORKGROUP_SUM}
      fn main(index : i32) {
        let c = i32(workgroupId.x);
        let C = uniforms.channels;
        ${body}
      }`,
  };
}

/** Pass 1 forward: `[2, C]` rows `mean`, biased `variance` of `x` `[M, C]`. */
function statsProgram(channels: number): WgslProgram {
  return channelReduction(
    'sslZooBnStats',
    ['x'],
    2,
    channels,
    `
        var s = 0.0;
        for (var r = i32(localId.x); r < uniforms.rows; r = r + ${REDUCE_WORKGROUP}) {
          s = s + x[r * C + c];
        }
        let mean = workgroupSum(s) / f32(uniforms.rows);
        var q = 0.0;
        for (var r = i32(localId.x); r < uniforms.rows; r = r + ${REDUCE_WORKGROUP}) {
          let d = x[r * C + c] - mean;
          q = q + d * d;
        }
        let variance = workgroupSum(q) / f32(uniforms.rows);
        if (localId.x == 0u) {
          result[c] = mean;
          result[C + c] = variance;
        }`,
  );
}

/**
 * Pass 1 backward: `[6, C]` rows `dscale = invstd·Σ dy·(x − mean)`, `doffset = Σ dy`,
 * then `dx`'s coefficients `k1`, `k2`, `k3` and `mean`.
 */
function gradSumsProgram(channels: number, hasScale: boolean, hasDmean: boolean, hasDvariance: boolean): WgslProgram {
  const names = ['dy', 'x', 'mean', 'variance', ...(hasScale ? ['scale'] : []), ...(hasDmean ? ['dmean'] : []), ...(hasDvariance ? ['dvariance'] : [])];
  return channelReduction(
    `sslZooBnGradSums_${hasScale}_${hasDmean}_${hasDvariance}`,
    names,
    6,
    channels,
    `
        let mu = mean[c];
        var sdy = 0.0;
        var sdyx = 0.0;
        for (var r = i32(localId.x); r < uniforms.rows; r = r + ${REDUCE_WORKGROUP}) {
          let g = dy[r * C + c];
          sdy = sdy + g;
          sdyx = sdyx + g * (x[r * C + c] - mu);
        }
        let invstd = 1.0 / sqrt(variance[c] + uniforms.eps);
        let dscale = workgroupSum(sdyx) * invstd;
        let doffset = workgroupSum(sdy);
        let m = f32(uniforms.rows);
        let k1 = ${hasScale ? 'scale[c]' : '1.0'} * invstd;
        if (localId.x == 0u) {
          result[c] = dscale;
          result[C + c] = doffset;
          result[2 * C + c] = k1;
          result[3 * C + c] = -k1 * invstd * dscale / m + ${hasDvariance ? '2.0 * dvariance[c] / m' : '0.0'};
          result[4 * C + c] = -k1 * doffset / m + ${hasDmean ? 'dmean[c] / m' : '0.0'};
          result[5 * C + c] = mu;
        }`,
  );
}

/** An element-wise program over `[..., C]` (`c` is the channel of `index`). */
function elementwise(shaderKey: string, variableNames: string[], shape: number[], body: string): WgslProgram {
  const size = shape.reduce((a, b) => a * b, 1);
  return {
    variableNames,
    outputShape: shape,
    shaderKey,
    dispatchLayout: { x: shape.map((_, i) => i) },
    dispatch: elementwiseDispatch(size),
    workgroupSize: [ELEMENTWISE_WORKGROUP, 1, 1],
    size: true,
    uniforms: 'channels : i32, rows : i32, eps : f32,',
    getUserCode: () => `
      fn main(index : i32) {
        if (index < uniforms.size) {
          let C = uniforms.channels;
          let c = index % C;
          ${body}
        }
      }`,
  };
}

/** Pass 2 forward: `y = (x − mean)·invstd·scale + offset` from the `[2, C]` statistics. */
function normalizeProgram(shape: number[], hasScale: boolean, hasOffset: boolean): WgslProgram {
  const names = ['x', 'stats', ...(hasScale ? ['scale'] : []), ...(hasOffset ? ['offset'] : [])];
  return elementwise(
    `sslZooBnNormalize_${hasScale}_${hasOffset}`,
    names,
    shape,
    `
          let invstd = 1.0 / sqrt(stats[C + c] + uniforms.eps);
          result[index] = (x[index] - stats[c]) * invstd * ${hasScale ? 'scale[c]' : '1.0'} + ${hasOffset ? 'offset[c]' : '0.0'};`,
  );
}

/** Pass 2 backward: `dx = dy·k1 + (x − mean)·k2 + k3` from the `[6, C]` rows of pass 1. */
function dxProgram(shape: number[]): WgslProgram {
  return elementwise(
    'sslZooBnDx',
    ['dy', 'x', 'coefs'],
    shape,
    `
          result[index] = dy[index] * coefs[2 * C + c] + (x[index] - coefs[5 * C + c]) * coefs[3 * C + c] + coefs[4 * C + c];`,
  );
}

/** Copies row `row` of a `[rows, C]` tensor into a `[C]` one. */
function rowProgram(channels: number, row: number): WgslProgram {
  return {
    variableNames: ['rows2'],
    outputShape: [channels],
    shaderKey: `sslZooBnRow${row}`,
    dispatchLayout: { x: [0] },
    dispatch: elementwiseDispatch(channels),
    workgroupSize: [ELEMENTWISE_WORKGROUP, 1, 1],
    size: true,
    getUserCode: () => `
      fn main(index : i32) {
        if (index < uniforms.size) {
          result[index] = rows2[${row} * uniforms.size + index];
        }
      }`,
  };
}

function float32Input(args: WebGpuKernelArgs, name: string, kernel: string, required: true): TensorInfo;
function float32Input(args: WebGpuKernelArgs, name: string, kernel: string, required: false): TensorInfo | undefined;
function float32Input(args: WebGpuKernelArgs, name: string, kernel: string, required: boolean): TensorInfo | undefined {
  const t = args.inputs[name] ?? undefined;
  if (t == null) {
    if (required) throw new Error(`${kernel}: missing input '${name}'`);
    return undefined;
  }
  if (t.dtype !== 'float32') throw new Error(`${kernel}: input '${name}' must be float32, got ${t.dtype}`);
  return t;
}

/** `[channels, rows, eps]` as uniforms, from `x` `[..., C]` and the `varianceEpsilon` attribute. */
function shapeUniforms(x: TensorInfo, args: WebGpuKernelArgs, kernel: string): { channels: number; uniforms: UniformValue[] } {
  if (x.shape.length < 1) throw new Error(`${kernel}: x must be [..., C], got a scalar`);
  const channels = x.shape[x.shape.length - 1];
  const size = x.shape.reduce((a, b) => a * b, 1);
  if (channels <= 0 || size === 0) throw new Error(`${kernel}: empty input`);
  const eps = typeof args.attrs?.varianceEpsilon === 'number' ? args.attrs.varianceEpsilon : 1e-5;
  return {
    channels,
    uniforms: [
      { type: 'int32', data: [channels] },
      { type: 'int32', data: [size / channels] },
      { type: 'float32', data: [eps] },
    ],
  };
}

/** The first two `[C]` rows of a `[rows, C]` result, which is freed. */
function splitRows(args: WebGpuKernelArgs, both: TensorInfo, channels: number): [TensorInfo, TensorInfo] {
  const first = args.backend.runWebGPUProgram(rowProgram(channels, 0), [both], 'float32');
  const second = args.backend.runWebGPUProgram(rowProgram(channels, 1), [both], 'float32');
  args.backend.disposeData(both.dataId);
  return [first, second];
}

function batchNormTrain(args: WebGpuKernelArgs): TensorInfo[] {
  const x = float32Input(args, 'x', BATCH_NORM_TRAIN, true);
  const scale = float32Input(args, 'scale', BATCH_NORM_TRAIN, false);
  const offset = float32Input(args, 'offset', BATCH_NORM_TRAIN, false);
  const { channels, uniforms } = shapeUniforms(x, args, BATCH_NORM_TRAIN);
  const { backend } = args;
  const stats = backend.runWebGPUProgram(statsProgram(channels), [x], 'float32', uniforms);
  const normInputs = [x, stats, ...(scale ? [scale] : []), ...(offset ? [offset] : [])];
  const y = backend.runWebGPUProgram(normalizeProgram(x.shape.slice(), scale != null, offset != null), normInputs, 'float32', uniforms);
  return [y, ...splitRows(args, stats, channels)];
}

function batchNormTrainGrad(args: WebGpuKernelArgs): TensorInfo[] {
  const kernel = BATCH_NORM_TRAIN_GRAD;
  const dy = float32Input(args, 'dy', kernel, true);
  const x = float32Input(args, 'x', kernel, true);
  const mean = float32Input(args, 'mean', kernel, true);
  const variance = float32Input(args, 'variance', kernel, true);
  const scale = float32Input(args, 'scale', kernel, false);
  const dmean = float32Input(args, 'dmean', kernel, false);
  const dvariance = float32Input(args, 'dvariance', kernel, false);
  const { channels, uniforms } = shapeUniforms(x, args, kernel);
  const { backend } = args;
  const optional = [scale, dmean, dvariance].filter((t): t is TensorInfo => t != null);
  const sumsProgram = gradSumsProgram(channels, scale != null, dmean != null, dvariance != null);
  const coefs = backend.runWebGPUProgram(sumsProgram, [dy, x, mean, variance, ...optional], 'float32', uniforms);
  const dx = backend.runWebGPUProgram(dxProgram(x.shape.slice()), [dy, x, coefs], 'float32', uniforms);
  return [dx, ...splitRows(args, coefs, channels)];
}

/** The two batch-norm kernels, for `tf.registerKernel` on the webgpu backend. */
export const batchNormWebGpuKernels: tf.KernelConfig[] = [
  { kernelName: BATCH_NORM_TRAIN, backendName: 'webgpu', kernelFunc: batchNormTrain as unknown as tf.KernelFunc },
  { kernelName: BATCH_NORM_TRAIN_GRAD, backendName: 'webgpu', kernelFunc: batchNormTrainGrad as unknown as tf.KernelFunc },
];

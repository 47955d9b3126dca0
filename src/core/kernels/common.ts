/**
 * Shared plumbing of the native (oneDNN) cpu kernels: the addon's interface, the slice of
 * tfjs-backend-cpu's backend they use, and helpers to read float32 inputs.
 */
import { tf } from '../tf.js';

type TensorInfo = tf.TensorInfo;

/** The functions exported by `native/dnnl` (ssl_zoo_dnnl.node). Every call is synchronous. */
export interface DnnlAddon {
  readonly dnnlVersion: string;
  /** The instruction set oneDNN uses: the CPU's best, capped by `ONEDNN_MAX_CPU_ISA` (e.g. "avx2", "avx512_core_amx"). */
  readonly cpuIsa: string;
  /** c = act(op(a) x op(b) + bias); batch dims equal or one of them 1. */
  matmul(
    a: Float32Array,
    b: Float32Array,
    bias: Float32Array | null,
    out: Float32Array,
    batchA: number,
    batchB: number,
    m: number,
    n: number,
    k: number,
    transposeA: boolean,
    transposeB: boolean,
    activation: number,
    alpha: number,
  ): boolean;
  /** params: Int32Array [N,H,W,C, OH,OW,OC, KH,KW, sh,sw, dh,dw, pt,pl,pb,pr]. */
  conv2d(x: Float32Array, filter: Float32Array, bias: Float32Array | null, out: Float32Array, params: Int32Array, activation: number, alpha: number): boolean;
  conv2dBackpropInput(dy: Float32Array, filter: Float32Array, out: Float32Array, params: Int32Array): boolean;
  conv2dBackpropFilter(x: Float32Array, dy: Float32Array, out: Float32Array, params: Int32Array): boolean;
  setNumThreads(n: number): void;
  numThreads(): number;
  setLayoutMode(mode: number): void;
  clearCache(): void;
  cacheSize(): number;
  lastError(): string;
  /** oneDNN's implementation of the last primitive created since the previous call, or ''. */
  lastImpl(): string;
  [name: string]: unknown;
}

/** What the kernels use of tfjs-backend-cpu's `MathBackendCPU`. */
export interface CpuBackend {
  data: { get(dataId: unknown): { values?: unknown } };
  makeTensorInfo(shape: number[], dtype: tf.DataType, values?: Float32Array | Int32Array): TensorInfo;
  disposeIntermediateTensorInfo(t: TensorInfo): void;
}

/** What the JS-computed kernels of src/core (linalg.ts, eigen.ts) use of a host backend (`cpu`, `tensorflow`). */
export interface HostBackend {
  readSync(dataId: unknown): tf.TypedArray;
  makeTensorInfo(shape: number[], dtype: tf.DataType, values: Float32Array): tf.TensorInfo;
}

export interface KernelArgs {
  inputs: Record<string, TensorInfo | undefined>;
  backend: CpuBackend;
  attrs?: Record<string, unknown>;
}

/**
 * A native kernel: computes the result, or returns null to let the original pure-JS kernel
 * handle the call (unsupported dtype, attribute or shape).
 */
export type NativeKernelFunc = (args: KernelArgs, addon: DnnlAddon) => TensorInfo | TensorInfo[] | null;

export interface NativeKernel {
  kernelName: string;
  func: NativeKernelFunc;
}

/** The values of a float32 or int32 tensor. */
export type TypedValues = Float32Array | Int32Array;

/** The values of `t` when they are a float32 or int32 typed array of its dtype, else null. */
export function typedValues(backend: CpuBackend, t: TensorInfo | undefined): TypedValues | null {
  if (t == null) return null;
  const values = backend.data.get(t.dataId).values;
  if (t.dtype === 'float32' && values instanceof Float32Array) return values;
  if (t.dtype === 'int32' && values instanceof Int32Array) return values;
  return null;
}

/** A zeroed array of the dtype of `like` with `n` elements. */
export function zeroedLike(like: TypedValues, n: number): TypedValues {
  return like instanceof Float32Array ? new Float32Array(n) : new Int32Array(n);
}

/** The float32 values of `t`, or null when `t` is not a plain float32 tensor on the cpu backend. */
export function f32(backend: CpuBackend, t: TensorInfo | undefined): Float32Array | null {
  if (t == null || t.dtype !== 'float32') return null;
  const values = backend.data.get(t.dataId).values;
  return values instanceof Float32Array ? values : null;
}

export function sizeOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Activation codes of the addon (see native/dnnl/src/ops.h); undefined for unsupported ones. */
export function activationCode(activation: unknown): number | undefined {
  switch (activation ?? 'linear') {
    case 'linear':
      return 0;
    case 'relu':
      return 1;
    case 'relu6':
      return 2;
    case 'leakyrelu':
      return 3;
    case 'elu':
      return 4;
    case 'sigmoid':
      return 5;
    default:
      return undefined;
  }
}

/** Whether every value is a positive integer. */
export function allPositiveInts(xs: readonly number[]): boolean {
  return xs.every((x) => Number.isInteger(x) && x > 0);
}

/**
 * A new `Float32Array` of `n` elements with unspecified contents, for a kernel output that
 * the kernel overwrites completely: large outputs skip the allocator's zero-fill, a full
 * pass over memory that costs as much as a simple element-wise op.
 */
export function outputArray(n: number): Float32Array {
  if (n < 4096) return new Float32Array(n);
  const bytes = Buffer.allocUnsafeSlow(n * 4);
  return new Float32Array(bytes.buffer, bytes.byteOffset, n);
}

/** Bias and activation of a fused tfjs kernel (`FusedConv2D`, `_FusedMatMul`) in the addon's terms. */
export interface FusedEpilogue {
  bias: Float32Array | null;
  activation: number;
  alpha: number;
}

/**
 * The epilogue of a fused kernel call whose output has `outRank` axes and `channels` values
 * on the last: a per-channel bias (`[C]`, `[1, C]`, ... that does not change the output
 * shape) and a supported activation; null when the addon cannot run it (prelu, other
 * activations, other bias shapes or dtypes).
 */
export function fusedEpilogue(args: KernelArgs, outRank: number, channels: number): FusedEpilogue | null {
  const { inputs, backend, attrs = {} } = args;
  if (inputs.preluActivationWeights != null) return null;
  const activation = activationCode(attrs.activation);
  if (activation === undefined) return null;
  const alpha = typeof attrs.leakyreluAlpha === 'number' ? attrs.leakyreluAlpha : 0.2;
  const { bias } = inputs;
  if (bias == null) return { bias: null, activation, alpha };
  const bs = bias.shape;
  if (bs.length > outRank || sizeOf(bs) !== channels || (bs.length > 0 && bs[bs.length - 1] !== channels)) return null;
  const values = f32(backend, bias);
  return values == null ? null : { bias: values, activation, alpha };
}

/** No bias, linear activation: the epilogue of an unfused kernel. */
export const NO_EPILOGUE: FusedEpilogue = { bias: null, activation: 0, alpha: 0 };

/** Registers `config` as its kernel's gradient unless the kernel has one already (idempotent). */
export function registerGradientOnce(config: tf.GradConfig): void {
  if (tf.getGradient(config.kernelName) == null) tf.registerGradient(config);
}

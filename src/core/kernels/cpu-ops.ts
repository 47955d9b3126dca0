/**
 * Native element-wise (with broadcasting), reduction, tile/transpose, batch-norm and pooling
 * kernels: plain OpenMP loops in the addon (native/dnnl/src/cpu_ops_bindings.cc and the kernel
 * files it calls). The JS versions of the broadcasting binary ops, of reductions over leading
 * axes (which transpose first) and of tile cost about 100 ns per element, which dominates a
 * batch-norm network's step.
 * Only float32 tensors are handled; anything else goes to the JS kernel.
 */
import { tf } from '../tf.js';
import { f32, outputArray, sizeOf, type CpuBackend, type DnnlAddon, type KernelArgs, type NativeKernel } from './common.js';

type TensorInfo = tf.TensorInfo;

/** The cpu_ops part of the addon (see native/dnnl/src/cpu_ops_bindings.cc). */
interface CpuOpsAddon {
  binary(op: number, a: Float32Array, b: Float32Array, out: Float32Array, shape: Int32Array, aStrides: Int32Array, bStrides: Int32Array): void;
  unary(op: number, x: Float32Array, out: Float32Array, alpha: number): void;
  reduce(op: number, x: Float32Array, out: Float32Array, outer: number, reduced: number, inner: number, scale: number): void;
  tile(x: Float32Array, out: Float32Array, xShape: Int32Array, reps: Int32Array): void;
  transpose(x: Float32Array, out: Float32Array, xShape: Int32Array, perm: Int32Array): void;
  batchNorm(
    x: Float32Array,
    out: Float32Array,
    channels: number,
    mean: Float32Array,
    variance: Float32Array,
    scale: Float32Array | null,
    offset: Float32Array | null,
    eps: number,
  ): void;
  maxPool(x: Float32Array, out: Float32Array, params: Int32Array): void;
  avgPool(x: Float32Array, out: Float32Array, params: Int32Array): void;
  maxPoolGrad(dy: Float32Array, x: Float32Array, out: Float32Array, params: Int32Array): void;
  avgPoolGrad(dy: Float32Array, out: Float32Array, params: Int32Array): void;
}

function ops(addon: DnnlAddon): CpuOpsAddon {
  return addon as unknown as CpuOpsAddon;
}

/** Above this many elements Int32Array indexing could overflow in the addon. */
const MAX_ELEMENTS = 2 ** 31 - 1;

function output(backend: CpuBackend, shape: number[], values: Float32Array): TensorInfo {
  return backend.makeTensorInfo(shape, 'float32', values);
}

// ------------------------------------------------------------------------------- binary

const BINARY_OPS: Record<string, number> = {
  Add: 0,
  Sub: 1,
  Multiply: 2,
  RealDiv: 3,
  SquaredDifference: 4,
  Maximum: 5,
  Minimum: 6,
};

/** Element strides of `shape` aligned to the right of an output of rank `rank`, 0 where broadcast. */
function broadcastStrides(shape: readonly number[], outShape: readonly number[]): Int32Array {
  const rank = outShape.length;
  const strides = new Int32Array(rank);
  let stride = 1;
  for (let i = shape.length - 1, d = rank - 1; d >= 0; i--, d--) {
    const dim = i >= 0 ? shape[i] : 1;
    strides[d] = dim === 1 && outShape[d] !== 1 ? 0 : stride;
    stride *= dim;
  }
  return strides;
}

function binaryKernel(kernelName: string): NativeKernel {
  const op = BINARY_OPS[kernelName];
  return {
    kernelName,
    func: ({ inputs, backend }, addon) => {
      const { a, b } = inputs;
      const aVals = f32(backend, a);
      const bVals = f32(backend, b);
      if (a == null || b == null || aVals == null || bVals == null) return null;
      let outShape: number[];
      try {
        outShape = tf.backend_util.assertAndGetBroadcastShape(a.shape, b.shape);
      } catch {
        return null;
      }
      const size = sizeOf(outShape);
      if (size === 0 || size > MAX_ELEMENTS) return null;
      const out = outputArray(size);
      const shape = outShape.length === 0 ? [1] : outShape;
      ops(addon).binary(op, aVals, bVals, out, Int32Array.from(shape), broadcastStrides(a.shape, shape), broadcastStrides(b.shape, shape));
      return output(backend, outShape, out);
    },
  };
}

// -------------------------------------------------------------------------------- unary

const UNARY_OPS: Record<string, number> = {
  Relu: 0,
  Relu6: 1,
  Step: 2,
  Square: 3,
  Neg: 4,
  Sqrt: 5,
  Rsqrt: 6,
  Exp: 7,
  Log: 8,
  Abs: 9,
  Sigmoid: 10,
  Tanh: 11,
  Reciprocal: 12,
  Erf: 13,
};

function unaryKernel(kernelName: string): NativeKernel {
  const op = UNARY_OPS[kernelName];
  return {
    kernelName,
    func: ({ inputs, backend, attrs }, addon) => {
      const { x } = inputs;
      const xVals = f32(backend, x);
      if (x == null || xVals == null) return null;
      const size = sizeOf(x.shape);
      if (size === 0 || xVals.length !== size) return null;
      const alpha = kernelName === 'Step' ? Number(attrs?.alpha ?? 0) : 0;
      const out = outputArray(size);
      ops(addon).unary(op, xVals, out, alpha);
      return output(backend, x.shape.slice(), out);
    },
  };
}

// ---------------------------------------------------------------------------- reduction

const REDUCE_OPS: Record<string, number> = { Sum: 0, Mean: 0, Max: 1, Min: 2 };

/**
 * Reduces `x` of `shape` over `axes` with one native pass per run of adjacent reduced axes
 * (innermost first), each seeing the data as [outer, reduced, inner].
 */
function reduceValues(addon: CpuOpsAddon, op: number, x: Float32Array, shape: number[], axes: number[], scale: number): Float32Array {
  // Runs of adjacent dims with the same role; size-1 dims play no part.
  const groups: Array<{ size: number; reduced: boolean }> = [];
  shape.forEach((size, d) => {
    if (size === 1) return;
    const reduced = axes.includes(d);
    const last = groups[groups.length - 1];
    if (last && last.reduced === reduced) last.size *= size;
    else groups.push({ size, reduced });
  });
  let values = x;
  for (;;) {
    let j = -1;
    for (let i = groups.length - 1; i >= 0; i--) {
      if (groups[i].reduced) {
        j = i;
        break;
      }
    }
    const isLast = !groups.slice(0, Math.max(j, 0)).some((g) => g.reduced);
    if (j < 0) return values === x ? x.slice() : values;
    const outer = sizeOf(groups.slice(0, j).map((g) => g.size));
    const inner = sizeOf(groups.slice(j + 1).map((g) => g.size));
    const out = outputArray(outer * inner);
    addon.reduce(op, values, out, outer, groups[j].size, inner, isLast ? scale : 1);
    values = out;
    groups.splice(j, 1);
    // Merge the kept neighbours that are now adjacent.
    if (j > 0 && j < groups.length && !groups[j - 1].reduced && !groups[j].reduced) {
      groups[j - 1].size *= groups[j].size;
      groups.splice(j, 1);
    }
  }
}

function reduceKernel(kernelName: string): NativeKernel {
  const op = REDUCE_OPS[kernelName];
  return {
    kernelName,
    func: ({ inputs, backend, attrs = {} }, addon) => {
      const { x } = inputs;
      const xVals = f32(backend, x);
      if (x == null || xVals == null || x.shape.length === 0) return null;
      const size = sizeOf(x.shape);
      if (size === 0 || size > MAX_ELEMENTS || xVals.length !== size) return null;
      let axes: number[];
      try {
        // Max names its axes `reductionIndices`; Sum, Mean and Min name them `axis`.
        const axis = kernelName === 'Max' ? attrs.reductionIndices : attrs.axis;
        axes = tf.util.parseAxisParam(axis as number | number[], x.shape);
      } catch {
        return null;
      }
      if (axes.length === 0) return null;
      const [outShape, reduceShape] = tf.backend_util.computeOutAndReduceShapes(x.shape, axes);
      const reduceSize = sizeOf(reduceShape);
      const scale = kernelName === 'Mean' ? 1 / reduceSize : 1;
      const values = reduceValues(ops(addon), op, xVals, x.shape, axes, scale);
      const shape = attrs.keepDims === true ? tf.backend_util.expandShapeToKeepDim(outShape, axes) : outShape;
      return output(backend, shape, values);
    },
  };
}

// ------------------------------------------------------------------------ tile, transpose

const tileKernel: NativeKernel = {
  kernelName: 'Tile',
  func: ({ inputs, backend, attrs = {} }, addon) => {
    const { x } = inputs;
    const xVals = f32(backend, x);
    const reps = attrs.reps as number[] | undefined;
    if (x == null || xVals == null || !Array.isArray(reps) || reps.length !== x.shape.length || x.shape.length === 0) return null;
    const outShape = x.shape.map((d, i) => d * reps[i]);
    const size = sizeOf(outShape);
    if (size === 0 || size > MAX_ELEMENTS || !reps.every((r) => Number.isInteger(r) && r > 0)) return null;
    const out = outputArray(size);
    ops(addon).tile(xVals, out, Int32Array.from(x.shape), Int32Array.from(reps));
    return output(backend, outShape, out);
  },
};

const transposeKernel: NativeKernel = {
  kernelName: 'Transpose',
  func: ({ inputs, backend, attrs = {} }, addon) => {
    const { x } = inputs;
    const xVals = f32(backend, x);
    const perm = attrs.perm as number[] | undefined;
    if (x == null || xVals == null || !Array.isArray(perm) || perm.length !== x.shape.length || x.shape.length === 0) return null;
    const size = sizeOf(x.shape);
    if (size === 0 || size > MAX_ELEMENTS) return null;
    const out = outputArray(size);
    ops(addon).transpose(xVals, out, Int32Array.from(x.shape), Int32Array.from(perm));
    return output(
      backend,
      perm.map((p) => x.shape[p]),
      out,
    );
  },
};

// --------------------------------------------------------------------------- batch norm

const batchNormKernel: NativeKernel = {
  kernelName: 'FusedBatchNorm',
  func: ({ inputs, backend, attrs = {} }, addon) => {
    const { x, mean, variance, offset, scale } = inputs;
    const xVals = f32(backend, x);
    const mVals = f32(backend, mean);
    const vVals = f32(backend, variance);
    if (x == null || xVals == null || mVals == null || vVals == null || x.shape.length === 0) return null;
    const sVals = scale == null ? null : f32(backend, scale);
    const oVals = offset == null ? null : f32(backend, offset);
    if ((scale != null && sVals == null) || (offset != null && oVals == null)) return null;
    const channels = x.shape[x.shape.length - 1];
    const size = sizeOf(x.shape);
    if (size === 0 || xVals.length !== size) return null;
    // The JS kernel cycles through each parameter; that is a per-channel value for C values.
    const fits = (v: Float32Array | null) => v == null || v.length === 1 || v.length === channels;
    if (![mVals, vVals, sVals, oVals].every(fits)) return null;
    const eps = typeof attrs.varianceEpsilon === 'number' ? attrs.varianceEpsilon : 0.001;
    const out = outputArray(size);
    ops(addon).batchNorm(xVals, out, channels, mVals, vVals, sVals, oVals, eps);
    return output(backend, x.shape.slice(), out);
  },
};

// ------------------------------------------------------------------------------ pooling

function poolInfo(xShape: number[], attrs: Record<string, unknown>): tf.backend_util.Conv2DInfo | null {
  if (xShape.length !== 4) return null;
  try {
    return tf.backend_util.computePool2DInfo(
      xShape as [number, number, number, number],
      attrs.filterSize as [number, number] | number,
      attrs.strides as [number, number] | number,
      1,
      attrs.pad as 'valid' | 'same' | number,
      attrs.dimRoundingMode as 'floor' | 'round' | 'ceil' | undefined,
    );
  } catch {
    return null;
  }
}

/** [N,H,W,C, OH,OW, KH,KW, sh,sw, pt,pl], or null when not a plain NHWC pooling. */
function poolParams(info: tf.backend_util.Conv2DInfo): Int32Array | null {
  const q = [
    info.batchSize,
    info.inHeight,
    info.inWidth,
    info.inChannels,
    info.outHeight,
    info.outWidth,
    info.filterHeight,
    info.filterWidth,
    info.strideHeight,
    info.strideWidth,
    info.padInfo.top,
    info.padInfo.left,
  ];
  if (!q.every((v) => Number.isInteger(v)) || !q.slice(0, 10).every((v) => v > 0) || q[10] < 0 || q[11] < 0) return null;
  if (info.dilationHeight !== 1 || info.dilationWidth !== 1) return null;
  if (sizeOf(info.inShape) > MAX_ELEMENTS || sizeOf(info.outShape) > MAX_ELEMENTS) return null;
  return Int32Array.from(q);
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

function poolKernel(kernelName: 'MaxPool' | 'AvgPool'): NativeKernel {
  return {
    kernelName,
    func: ({ inputs, backend, attrs = {} }: KernelArgs, addon) => {
      const { x } = inputs;
      const xVals = f32(backend, x);
      if (x == null || xVals == null) return null;
      const info = poolInfo(x.shape, attrs);
      const params = info && poolParams(info);
      if (info == null || params == null) return null;
      const out = outputArray(sizeOf(info.outShape));
      if (kernelName === 'MaxPool') ops(addon).maxPool(xVals, out, params);
      else ops(addon).avgPool(xVals, out, params);
      return output(backend, info.outShape.slice(), out);
    },
  };
}

const maxPoolGradKernel: NativeKernel = {
  kernelName: 'MaxPoolGrad',
  func: ({ inputs, backend, attrs = {} }, addon) => {
    const { dy, input } = inputs;
    const dyVals = f32(backend, dy);
    const xVals = f32(backend, input);
    if (dy == null || input == null || dyVals == null || xVals == null) return null;
    const info = poolInfo(input.shape, attrs);
    const params = info && poolParams(info);
    if (info == null || params == null || !sameShape(info.outShape, dy.shape)) return null;
    const out = new Float32Array(sizeOf(input.shape));
    ops(addon).maxPoolGrad(dyVals, xVals, out, params);
    return output(backend, input.shape.slice(), out);
  },
};

const avgPoolGradKernel: NativeKernel = {
  kernelName: 'AvgPoolGrad',
  func: ({ inputs, backend, attrs = {} }, addon) => {
    const { dy, input } = inputs;
    const dyVals = f32(backend, dy);
    if (dy == null || input == null || dyVals == null) return null;
    // The JS kernel ignores dimRoundingMode here; so do we.
    const info = poolInfo(input.shape, { ...attrs, dimRoundingMode: undefined });
    const params = info && poolParams(info);
    if (info == null || params == null || !sameShape(info.outShape, dy.shape)) return null;
    const out = new Float32Array(sizeOf(input.shape));
    ops(addon).avgPoolGrad(dyVals, out, params);
    return output(backend, input.shape.slice(), out);
  },
};

export const cpuOpKernels: NativeKernel[] = [
  ...Object.keys(BINARY_OPS).map(binaryKernel),
  ...Object.keys(UNARY_OPS).map(unaryKernel),
  ...Object.keys(REDUCE_OPS).map(reduceKernel),
  tileKernel,
  transposeKernel,
  batchNormKernel,
  poolKernel('MaxPool'),
  poolKernel('AvgPool'),
  maxPoolGradKernel,
  avgPoolGradKernel,
];

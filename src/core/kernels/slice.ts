/**
 * Block-copying `Slice`, `SplitV`, `Unpack` and `PadV2` for the cpu backend, in plain JS over typed
 * arrays (no addon call). tfjs's JS kernels move one element at a time through coordinate
 * arrays (`indexToLoc` / `locToIndex`, about 100 ns per element) whenever the block is not one
 * contiguous range: a slice or a split along a middle axis (the `[CLS]` token of `[B, N, D]`
 * tokens, MAE's kept/masked token halves), an unstack along one (VICReg-L's locations of
 * `[B, M, C]`: tfjs's `Unpack` calls its JS slice directly, past a registered `Slice`), and every
 * slice's gradient (a `PadV2` with zeros). MAE's decoder at batch 64 spent 11 s a step in them,
 * VICReg-L 6 s of a 16 s step. These copy the block's contiguous runs (the innermost axes it
 * spans whole) with `TypedArray.set`.
 *
 * All four only move values, so they are exact. Contiguous slices, strings and complex
 * values go to the JS kernels (a contiguous slice there is already a zero-copy `subarray`).
 */
import { tf } from '../tf.js';
import { sizeOf, typedValues, zeroedLike, type CpuBackend, type NativeKernel, type TypedValues as Values } from './common.js';

type TensorInfo = tf.TensorInfo;

/** Row-major strides of `shape`. */
function stridesOf(shape: number[]): number[] {
  const strides = new Array<number>(shape.length).fill(1);
  for (let i = shape.length - 2; i >= 0; i--) strides[i] = strides[i + 1]! * shape[i + 1]!;
  return strides;
}

/**
 * Copies the box of extent `size` at `srcBegin` in `src` (shape `srcShape`) to `dstBegin` in
 * `dst` (shape `dstShape`; both of the same rank as `size`). The innermost axes the box spans
 * whole in both arrays are copied as one run per position of the outer axes.
 */
function copyBox(src: Values, srcShape: number[], srcBegin: number[], dst: Values, dstShape: number[], dstBegin: number[], size: number[]): void {
  const rank = size.length;
  if (sizeOf(size) === 0) return;
  if (rank === 0) {
    dst[0] = src[0]!;
    return;
  }
  // Axis k is the outermost axis of the run: every axis after it is whole in src, dst and the box.
  let k = rank - 1;
  while (k > 0 && size[k] === srcShape[k] && size[k] === dstShape[k]) k--;
  const srcStrides = stridesOf(srcShape);
  const dstStrides = stridesOf(dstShape);
  const run = size[k]! * (srcStrides[k] ?? 1);
  const outer = size.slice(0, k);
  const count = sizeOf(outer);
  const coord = new Array<number>(k).fill(0);
  for (let n = 0; n < count; n++) {
    let s = srcBegin[k]! * srcStrides[k]!;
    let d = dstBegin[k]! * dstStrides[k]!;
    for (let i = 0; i < k; i++) {
      s += (coord[i]! + srcBegin[i]!) * srcStrides[i]!;
      d += (coord[i]! + dstBegin[i]!) * dstStrides[i]!;
    }
    if (run < 16) for (let j = 0; j < run; j++) dst[d + j] = src[s + j]!;
    else dst.set(src.subarray(s, s + run), d);
    for (let i = k - 1; i >= 0; i--) {
      if (++coord[i]! < outer[i]!) break;
      coord[i] = 0;
    }
  }
}

/** A copy of the block `[begin, begin + size)` of `x` (values of its dtype), of shape `shape` (default `size`; the same number of values). */
function copySlice(backend: CpuBackend, x: TensorInfo, values: Values, begin: number[], size: number[], shape = size): TensorInfo {
  const out = zeroedLike(values, sizeOf(size));
  copyBox(values, x.shape, begin, out, size, new Array<number>(size.length).fill(0), size);
  return backend.makeTensorInfo(shape, x.dtype, out);
}

/** `Slice`: `x [...]` -> the block `[begin, begin + size)` (negative size: to the end). */
const sliceKernel: NativeKernel = {
  kernelName: 'Slice',
  func: ({ inputs, backend, attrs = {} }) => {
    const { x } = inputs;
    if (x == null) return null;
    const [begin, size] = tf.slice_util.parseSliceParams(x as tf.Tensor, attrs.begin as number[], attrs.size as number[]);
    tf.slice_util.assertParamsValid(x as tf.Tensor, begin, size);
    const values = typedValues(backend, x);
    if (values == null || tf.slice_util.isSliceContinous(x.shape, begin, size)) return null;
    return copySlice(backend, x, values, begin, size);
  },
};

/** `SplitV`: `x` cut along `axis` into pieces of the given sizes (or a number of equal pieces). */
const splitVKernel: NativeKernel = {
  kernelName: 'SplitV',
  func: ({ inputs, backend, attrs = {} }) => {
    const { x } = inputs;
    const values = typedValues(backend, x);
    if (x == null || values == null) return null;
    const axis = tf.util.parseAxisParam(attrs.axis as number, x.shape)[0]!;
    const sizes = tf.backend_util.prepareSplitSize(x as tf.Tensor, attrs.numOrSizeSplits as number[] | number, axis);
    // Splits along the first non-unit axis are contiguous: the JS kernel's zero-copy subarrays.
    if (x.shape.slice(0, axis).every((d) => d === 1)) return null;
    const begin = new Array<number>(x.shape.length).fill(0);
    return sizes.map((s) => {
      const size = [...x.shape];
      size[axis] = s;
      const piece = copySlice(backend, x, values, begin, size);
      begin[axis] += s;
      return piece;
    });
  },
};

/** `Unpack` (`tf.unstack`): `value` cut along `axis` into its `shape[axis]` slices, that axis dropped. */
const unpackKernel: NativeKernel = {
  kernelName: 'Unpack',
  func: ({ inputs, backend, attrs = {} }) => {
    const { value } = inputs;
    const values = typedValues(backend, value);
    if (value == null || values == null) return null;
    const rank = value.shape.length;
    const axis = (attrs.axis as number) < 0 ? (attrs.axis as number) + rank : (attrs.axis as number);
    // Along the first non-unit axis every slice is contiguous: the JS kernel's zero-copy subarrays.
    if (value.shape.slice(0, axis).every((d) => d === 1)) return null;
    const begin = new Array<number>(rank).fill(0);
    const size = [...value.shape];
    size[axis] = 1;
    const outShape = value.shape.filter((_, i) => i !== axis);
    return Array.from({ length: value.shape[axis]! }, (_, i) => {
      begin[axis] = i;
      return copySlice(backend, value, values, begin, size, outShape);
    });
  },
};

/** `PadV2`: `x` inside a block of `constantValue`, `paddings[i]` = [before, after] on axis i. */
const padV2Kernel: NativeKernel = {
  kernelName: 'PadV2',
  func: ({ inputs, backend, attrs = {} }) => {
    const { x } = inputs;
    const values = typedValues(backend, x);
    if (x == null || values == null) return null;
    const paddings = attrs.paddings as Array<[number, number]>;
    const constantValue = (attrs.constantValue as number | undefined) ?? 0;
    const shape = paddings.map(([before, after], i) => before + x.shape[i]! + after);
    const out = zeroedLike(values, sizeOf(shape));
    if (constantValue !== 0) out.fill(constantValue);
    copyBox(
      values,
      x.shape,
      new Array<number>(x.shape.length).fill(0),
      out,
      shape,
      paddings.map(([before]) => before),
      x.shape,
    );
    return backend.makeTensorInfo(shape, x.dtype, out);
  },
};

export const sliceKernels: NativeKernel[] = [sliceKernel, splitVKernel, unpackKernel, padV2Kernel];

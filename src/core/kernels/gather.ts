/**
 * Row-copying `GatherV2` and row-accumulating `UnsortedSegmentSum` for the cpu backend, in
 * plain JS over typed arrays (no addon call). tfjs's JS `GatherV2` converts every element's
 * flat index to coordinates and back (about 100 ns per element), and its `UnsortedSegmentSum`
 * (the gradient of a gather) masks and sums the whole input once per segment: O(segments x
 * size), minutes per step for the patch gathers of a ViT in MAE (12,544 segments of a
 * `[3072, 192]` gradient at batch 256). These copy and add whole slices in one pass.
 *
 * `GatherV2` copies values, so it is exact. Each output row of `UnsortedSegmentSum` adds its
 * input rows in increasing row order (deterministic; a segment hit once, as in a permutation,
 * is a copy and exact too).
 */
import { tf } from '../tf.js';
import { sizeOf, typedValues, zeroedLike, type NativeKernel } from './common.js';

/**
 * `GatherV2` without batch dims: `x [outer..., A, inner...]`, `indices` (any shape, values in
 * [0, A)) -> `[outer..., indices..., inner...]`. An index out of range throws tfjs's error.
 */
const gatherKernel: NativeKernel = {
  kernelName: 'GatherV2',
  func: ({ inputs, backend, attrs = {} }) => {
    const { x, indices } = inputs;
    const xVals = typedValues(backend, x);
    const idx = typedValues(backend, indices);
    if (x == null || indices == null || xVals == null || !(idx instanceof Int32Array) || (attrs.batchDims ?? 0) !== 0) return null;
    const axis = tf.util.parseAxisParam(attrs.axis as number, x.shape)[0];
    const axisDim = x.shape[axis];
    for (const i of idx) {
      if (!(i >= 0 && i < axisDim)) throw new Error(`GatherV2: the index value ${i} is not in [0, ${axisDim - 1}]`);
    }
    const outer = sizeOf(x.shape.slice(0, axis));
    const inner = sizeOf(x.shape.slice(axis + 1));
    const out = zeroedLike(xVals, outer * idx.length * inner);
    let o = 0;
    for (let b = 0; b < outer; b++) {
      const base = b * axisDim * inner;
      if (inner === 1) {
        for (const i of idx) out[o++] = xVals[base + i];
      } else {
        for (const i of idx) {
          const from = base + i * inner;
          out.set(xVals.subarray(from, from + inner), o);
          o += inner;
        }
      }
    }
    const shape = [...x.shape.slice(0, axis), ...indices.shape, ...x.shape.slice(axis + 1)];
    return backend.makeTensorInfo(shape, x.dtype, out);
  },
};

/**
 * `UnsortedSegmentSum` with one segment id per leading row: `x [N, inner...]`, `segmentIds
 * [N]` -> `[numSegments, inner...]`, row s the sum of the rows whose id is s (ids outside
 * [0, numSegments) dropped, as in TensorFlow). Other id ranks go to the JS kernel.
 */
const unsortedSegmentSumKernel: NativeKernel = {
  kernelName: 'UnsortedSegmentSum',
  func: ({ inputs, backend, attrs = {} }) => {
    const { x, segmentIds } = inputs;
    const xVals = typedValues(backend, x);
    const ids = typedValues(backend, segmentIds);
    const numSegments = attrs.numSegments as number;
    if (x == null || segmentIds == null || xVals == null || !(ids instanceof Int32Array)) return null;
    if (segmentIds.shape.length !== 1 || x.shape.length < 1 || x.shape[0] !== ids.length || !Number.isInteger(numSegments)) return null;
    const inner = sizeOf(x.shape.slice(1));
    const out = zeroedLike(xVals, numSegments * inner);
    for (let row = 0; row < ids.length; row++) {
      const s = ids[row];
      if (!(s >= 0 && s < numSegments)) continue;
      const to = s * inner;
      const from = row * inner;
      for (let j = 0; j < inner; j++) out[to + j] += xVals[from + j];
    }
    return backend.makeTensorInfo([numSegments, ...x.shape.slice(1)], x.dtype, out);
  },
};

export const gatherKernels: NativeKernel[] = [gatherKernel, unsortedSegmentSumKernel];

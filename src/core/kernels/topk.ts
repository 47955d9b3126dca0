/**
 * `TopK` for the cpu backend, in plain JS over typed arrays (no addon call). tfjs's JS kernel
 * makes one `{ value, index }` object per entry of every row, selects among them and sorts: the
 * kNN evaluation (rows of 60,000 similarities) and VICReg-L's location matching spent seconds
 * of a run in it and in the garbage collector. This one keeps the row's best k in a binary heap
 * of typed arrays, one pass over the row, then sorts those k.
 *
 * The same order as tfjs's (`comparePair`): larger value first, the lower index first among
 * equal values (+0 and -0 are equal), so the same entries in the same order: exact, and a
 * nearest-neighbour decision stays the one tfjs makes. A row with NaN and `sorted: false` (whose
 * order tfjs leaves to its selection algorithm) go to the JS kernel.
 */
import { typedValues, zeroedLike, type NativeKernel, type TypedValues as Values } from './common.js';

/**
 * Writes the k best entries of `row` (larger value first, lower index first on ties) to
 * `values` and `indices`; false when the row holds NaN (nothing written).
 */
function topOfRow(row: Values, k: number, values: Values, indices: Int32Array, heapValues: Float64Array, heapIndices: Int32Array): boolean {
  // A min-heap of the best k so far: its root is the worst of them (the smaller value, or the
  // higher index of equal values). Entries arrive in index order, so an entry equal to the root
  // never displaces it.
  const worse = (a: number, b: number) => heapValues[a]! < heapValues[b]! || (heapValues[a] === heapValues[b] && heapIndices[a]! > heapIndices[b]!);
  const swap = (a: number, b: number) => {
    const v = heapValues[a]!;
    heapValues[a] = heapValues[b]!;
    heapValues[b] = v;
    const i = heapIndices[a]!;
    heapIndices[a] = heapIndices[b]!;
    heapIndices[b] = i;
  };
  const siftDown = (size: number) => {
    for (let at = 0; ;) {
      const l = 2 * at + 1;
      if (l >= size) return;
      const child = l + 1 < size && worse(l + 1, l) ? l + 1 : l;
      if (!worse(child, at)) return;
      swap(child, at);
      at = child;
    }
  };
  let size = 0;
  for (let i = 0; i < row.length; i++) {
    const v = row[i]!;
    if (v !== v) return false; // NaN
    if (size < k) {
      heapValues[size] = v;
      heapIndices[size] = i;
      for (let at = size++; at > 0;) {
        const parent = (at - 1) >> 1;
        if (!worse(at, parent)) break;
        swap(at, parent);
        at = parent;
      }
    } else if (v > heapValues[0]!) {
      heapValues[0] = v;
      heapIndices[0] = i;
      siftDown(size);
    }
  }
  // Pop the worst to the back: the best ends first.
  for (let end = size - 1; end >= 0; end--) {
    values[end] = heapValues[0]!;
    indices[end] = heapIndices[0]!;
    swap(0, end);
    siftDown(end);
  }
  return true;
}

/** `TopK`: `x [..., n]` -> the k largest of each last-axis row, sorted: values `[..., k]` (x's dtype) and indices `[..., k]` int32. */
const topKKernel: NativeKernel = {
  kernelName: 'TopK',
  func: ({ inputs, backend, attrs = {} }) => {
    const { x } = inputs;
    const all = typedValues(backend, x);
    const k = attrs.k as number;
    if (x == null || all == null || attrs.sorted === false || x.shape.length === 0) return null;
    const n = x.shape[x.shape.length - 1]!;
    if (!Number.isInteger(k) || k < 0 || k > n) return null; // tfjs's op checks; its kernel reports
    const rows = n === 0 ? 0 : all.length / n;
    const values = zeroedLike(all, rows * k);
    const indices = new Int32Array(rows * k);
    const heapValues = new Float64Array(k);
    const heapIndices = new Int32Array(k);
    for (let r = 0; r < rows; r++) {
      const done = topOfRow(
        all.subarray(r * n, (r + 1) * n),
        k,
        values.subarray(r * k, (r + 1) * k),
        indices.subarray(r * k, (r + 1) * k),
        heapValues,
        heapIndices,
      );
      if (!done) return null;
    }
    const shape = [...x.shape.slice(0, -1), k];
    return [backend.makeTensorInfo(shape, x.dtype, values), backend.makeTensorInfo(shape.slice(), 'int32', indices)];
  },
};

export const topKKernels: NativeKernel[] = [topKKernel];

/**
 * Symmetric eigen-decomposition and the nuclear norm, which tfjs lacks: pure JS in float64
 * on the host (small matrices, n up to a few hundred), and a differentiable nuclear norm
 * (`tf.customGrad`) over a registered kernel, so that every engine computes it where its
 * tensors live:
 * - `SslZooNuclearNorm` (input `x` `[S, R, C]`, output `[S, R·C + 1]`: per matrix `U Vᵀ` of
 *   its reduced SVD, row-major `[R, C]`, then its nuclear norm);
 * - on the `cpu` and `tensorflow` backends (registered here): the Gram matrix of the smaller
 *   side and its eigen-decomposition in float64 ({@link traceSqrtPsd});
 * - on `webgpu`: one-sided Jacobi rotations in float32, one workgroup per matrix
 *   (src/core/kernels/webgpu/nuclear-norm.ts, installed with the engine): no read of the device.
 */
import type { HostBackend } from './kernels/common.js';
import { tf, type Tensor } from './tf.js';

export const NUCLEAR_NORM = 'SslZooNuclearNorm';

/** Eigenvalues (ascending order not promised) and eigenvectors (the columns of a row-major `[n, n]`). */
export interface SymmetricEigen {
  values: Float64Array;
  vectors: Float64Array;
}

/** Largest number of cyclic Jacobi sweeps (convergence is quadratic: about 6 to 10 for n ≤ 512). */
const MAX_SWEEPS = 60;

/**
 * The eigen-decomposition `A = V diag(values) Vᵀ` of a symmetric matrix `a` (row-major
 * `[n, n]`, float64; only its symmetric part `(A + Aᵀ)/2` is used) by cyclic Jacobi rotations,
 * to float64 accuracy (off-diagonal mass below 1e-30 of the Frobenius norm²). O(n³) a sweep.
 */
export function symmetricEigen(a: ArrayLike<number>, n: number): SymmetricEigen {
  if (a.length !== n * n) throw new Error(`symmetricEigen: expected ${n * n} entries for [${n}, ${n}], got ${a.length}`);
  const m = new Float64Array(n * n);
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) m[i * n + j] = (a[i * n + j]! + a[j * n + i]!) / 2;
  const v = new Float64Array(n * n);
  for (let i = 0; i < n; i++) v[i * n + i] = 1;
  let total = 0;
  for (let i = 0; i < n * n; i++) total += m[i]! * m[i]!;
  for (let sweep = 0; sweep < MAX_SWEEPS; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += 2 * m[p * n + q]! * m[p * n + q]!;
    if (!(off > 1e-30 * total)) break;
    for (let p = 0; p < n; p++) {
      for (let q = p + 1; q < n; q++) {
        const apq = m[p * n + q]!;
        if (apq === 0) continue;
        const theta = (m[q * n + q]! - m[p * n + p]!) / (2 * apq);
        const t = (theta >= 0 ? 1 : -1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1);
        const s = t * c;
        rotate(m, n, p, q, c, s);
        for (let k = 0; k < n; k++) {
          const [vkp, vkq] = [v[k * n + p]!, v[k * n + q]!];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  const values = new Float64Array(n);
  for (let i = 0; i < n; i++) values[i] = m[i * n + i]!;
  return { values, vectors: v };
}

/** `M ← Jᵀ M J` for the rotation J of the plane (p, q) with cosine c and sine s. */
function rotate(m: Float64Array, n: number, p: number, q: number, c: number, s: number): void {
  for (let k = 0; k < n; k++) {
    const [mkp, mkq] = [m[k * n + p]!, m[k * n + q]!];
    m[k * n + p] = c * mkp - s * mkq;
    m[k * n + q] = s * mkp + c * mkq;
  }
  for (let k = 0; k < n; k++) {
    const [mpk, mqk] = [m[p * n + k]!, m[q * n + k]!];
    m[p * n + k] = c * mpk - s * mqk;
    m[q * n + k] = s * mpk + c * mqk;
  }
}

/** Eigenvalues at most this fraction of the largest count as zero (a Gram matrix in float64 of float32 data). */
export const PSD_RELATIVE_TOLERANCE = 1e-12;

/**
 * For a symmetric positive semi-definite `g` (row-major `[n, n]`, e.g. a Gram matrix `XᵀX`):
 * `trace(g^{1/2})` (= the nuclear norm of X) and the pseudo-inverse square root `g^{+1/2}`
 * (row-major `[n, n]`), both over the eigenvalues above {@link PSD_RELATIVE_TOLERANCE} of the
 * largest (the others, round-off of zero, count as zero).
 */
export function traceSqrtPsd(g: ArrayLike<number>, n: number): { trace: number; inverseSqrt: Float64Array } {
  const { values, vectors } = symmetricEigen(g, n);
  const tol = Math.max(0, ...values) * PSD_RELATIVE_TOLERANCE;
  let trace = 0;
  const inverseSqrt = new Float64Array(n * n);
  for (let e = 0; e < n; e++) {
    const lambda = values[e]!;
    if (!(lambda > tol)) continue;
    const root = Math.sqrt(lambda);
    trace += root;
    for (let i = 0; i < n; i++) {
      const vi = vectors[i * n + e]! / root;
      for (let j = 0; j < n; j++) inverseSqrt[i * n + j] += vi * vectors[j * n + e]!;
    }
  }
  return { trace, inverseSqrt };
}

/** `Xᵀ X` (`[c, c]`, float64) of a row-major `[r, c]` block starting at `offset`. */
export function gramOfColumns(x: ArrayLike<number>, r: number, c: number, offset = 0): Float64Array {
  const g = new Float64Array(c * c);
  for (let k = 0; k < r; k++) {
    const row = offset + k * c;
    for (let i = 0; i < c; i++) {
      const xi = x[row + i]!;
      if (xi === 0) continue;
      for (let j = 0; j < c; j++) g[i * c + j] += xi * x[row + j]!;
    }
  }
  return g;
}

/**
 * The nuclear norm (sum of singular values) of a matrix `[R, C]` (a scalar) or of each matrix
 * of a batch `[S, R, C]` (`[S]`), differentiable: its gradient is `U Vᵀ` of the reduced SVD
 * (PyTorch's for `torch.linalg.svdvals(x).sum()` where every singular value is positive),
 * which the {@link NUCLEAR_NORM} kernel returns beside the norm. Singular values below 1e-6
 * of the largest count as zero.
 */
export function nuclearNorm<T extends tf.Tensor2D | tf.Tensor3D>(x: T): T extends tf.Tensor2D ? tf.Scalar : tf.Tensor1D {
  if (!(x.rank === 2 || x.rank === 3)) throw new Error(`nuclearNorm: expected [R, C] or [S, R, C], got shape [${x.shape.join(', ')}]`);
  if (x.dtype !== 'float32') throw new Error(`nuclearNorm: expected float32, got ${x.dtype}`);
  const batched = x.rank === 3;
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as Tensor;
    const save = args[1] as tf.GradSaveFunc;
    const [s, r, c] = batched ? (input.shape as [number, number, number]) : [1, input.shape[0]!, input.shape[1]!];
    const packed = tf.engine().runKernel(NUCLEAR_NORM, { x: tf.reshape(input, [s, r, c]) }) as tf.Tensor2D; // [S, R·C + 1]
    const direction = tf.reshape(tf.slice(packed, [0, 0], [s, r * c]), input.shape); // U Vᵀ
    save([direction]);
    const value = tf.reshape(tf.slice(packed, [0, r * c], [s, 1]), batched ? [s] : []);
    const gradFunc = (dy: Tensor, saved: Tensor[]): Tensor => tf.mul(tf.reshape(dy, batched ? [s, 1, 1] : []), saved[0]!);
    return { value, gradFunc };
  });
  return op(x) as T extends tf.Tensor2D ? tf.Scalar : tf.Tensor1D;
}

/** {@link NUCLEAR_NORM} on the host: `[S, R, C] -> [S, R·C + 1]`, through the Gram matrix of the smaller side in float64. */
const nuclearNormKernel: tf.KernelFunc = ({ inputs, backend }) => {
  const x = inputs.x as tf.TensorInfo;
  const host = backend as unknown as HostBackend;
  const [s, r0, c0] = x.shape as [number, number, number];
  const data = host.readSync(x.dataId) as Float32Array;
  // Work on Xᵀ when it has fewer columns, so that the Gram matrix is the smaller one.
  const transpose = r0 < c0;
  const [r, c] = transpose ? [c0, r0] : [r0, c0];
  const width = r0 * c0 + 1;
  const out = new Float32Array(s * width);
  for (let b = 0; b < s; b++) {
    const m = new Float64Array(r * c); // this matrix as [r, c] (transposed if needed)
    for (let i = 0; i < r0; i++) for (let j = 0; j < c0; j++) m[transpose ? j * c + i : i * c + j] = data[b * r0 * c0 + i * c0 + j]!;
    const { trace, inverseSqrt } = traceSqrtPsd(gramOfColumns(m, r, c), c);
    out[b * width + r0 * c0] = trace;
    for (let i = 0; i < r; i++) {
      for (let j = 0; j < c; j++) {
        let sum = 0;
        for (let k = 0; k < c; k++) sum += m[i * c + k]! * inverseSqrt[k * c + j]!;
        out[b * width + (transpose ? j * c0 + i : i * c0 + j)] = sum;
      }
    }
  }
  return host.makeTensorInfo([s, width], 'float32', out);
};

for (const backendName of ['cpu', 'tensorflow']) {
  if (tf.getKernel(NUCLEAR_NORM, backendName) == null) tf.registerKernel({ kernelName: NUCLEAR_NORM, backendName, kernelFunc: nuclearNormKernel });
}

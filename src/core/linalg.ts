/**
 * Dense linear algebra that tfjs lacks, as differentiable ops on small matrices (K up to a
 * few hundred): the Cholesky factor of a symmetric positive-definite matrix and the solution
 * of a lower-triangular system. Both take a matrix `[K, K]` or a batch of them `[S, K, K]`.
 *
 * Each is a registered kernel, so that every engine computes it where its tensors live:
 * - `SslZooCholesky` (input `a` `[S, K, K]`) and `SslZooSolveLowerTriangular` (inputs `l`
 *   `[S, K, K]`, `b` `[S, K, M]`, attribute `transpose`: solve `L X = B`, or `Lᵀ X = B`);
 * - on the `cpu` and `tensorflow` backends (registered here): float64 JS loops (O(K³) per
 *   matrix) rounded to float32, which throw on a matrix that is not positive definite or a
 *   zero pivot;
 * - on `webgpu`: WGSL programs in float32, one workgroup per matrix
 *   (src/core/kernels/webgpu/linalg.ts, installed with the engine), which give NaN
 *   instead of throwing (telling would need a read of the device).
 *
 * The gradients are PyTorch's (`torch.linalg.cholesky`, `solve_triangular`), composed of
 * tensor ops and the solve kernel, so they run on every engine.
 */
import { registerGradientOnce, type HostBackend } from './kernels/common.js';
import { tf, type Tensor } from './tf.js';

export const CHOLESKY = 'SslZooCholesky';
export const SOLVE_LOWER_TRIANGULAR = 'SslZooSolveLowerTriangular';

type Batched = tf.Tensor2D | tf.Tensor3D;

/** `[S, K, K]` of a `[K, K]` or `[S, K, K]` tensor (S = 1 for a matrix), and K. */
function batchShape(x: Tensor, fn: string, name: string): { batch: number; k: number } {
  const rank2 = x.rank === 2;
  if (!(rank2 || x.rank === 3) || x.shape.at(-1) !== x.shape.at(-2)) {
    throw new Error(`${fn}: ${name} must be a square matrix [K, K] or a batch [S, K, K], got shape [${x.shape.join(', ')}]`);
  }
  if (x.dtype !== 'float32') throw new Error(`${fn}: ${name} must be float32, got ${x.dtype}`);
  return { batch: rank2 ? 1 : x.shape[0]!, k: x.shape.at(-1)! };
}

/** `x` as a batch `[S, r, c]` (a matrix becomes a batch of one). */
function asBatch(x: Tensor): tf.Tensor3D {
  return (x.rank === 3 ? x : tf.expandDims(x, 0)) as tf.Tensor3D;
}

/**
 * The lower Cholesky factor of each matrix: `A = L Lᵀ`, `[K, K] -> [K, K]` or
 * `[S, K, K] -> [S, K, K]` (zeros above the diagonal). Only the lower triangle of A is read
 * (LAPACK's convention), so A is taken to be symmetric. A matrix that is not positive definite
 * (a pivot ≤ 0 or NaN): an error on the CPU engines, NaN entries on the GPU.
 *
 * Backward (PyTorch's `cholesky_backward`): for the incoming gradient Ḡ of L,
 * `Ā = L⁻ᵀ Φ(Lᵀ Ḡ) L⁻¹` with `Φ(X) = ½ (tril(X) + tril(X, −1)ᵀ)`: the gradient with respect
 * to symmetric perturbations of A (a symmetric matrix), which is what any A built
 * symmetrically (a covariance) needs.
 */
export function cholesky<T extends Batched>(a: T): T {
  batchShape(a, 'cholesky', 'A');
  return tf.tidy(() => tf.reshape(tf.engine().runKernel(CHOLESKY, { a: asBatch(a) }) as Tensor, a.shape) as T);
}

/**
 * `X = L⁻¹ B` for lower-triangular L: `[K, K], [K, M] -> [K, M]` or batched
 * `[S, K, K], [S, K, M] -> [S, K, M]` (forward substitution; only the lower triangle of L is
 * read). `solveLowerTriangular(L, I)` is L⁻¹. A zero diagonal entry: an error on the CPU
 * engines, Inf or NaN on the GPU.
 *
 * Backward (PyTorch's `linalg_solve_triangular` backward): `B̄ = L⁻ᵀ X̄` and
 * `L̄ = −tril(B̄ Xᵀ)`.
 */
export function solveLowerTriangular<T extends Batched>(l: T, b: T): T {
  const { batch, k } = batchShape(l, 'solveLowerTriangular', 'L');
  const expected = l.rank === 2 ? `[${k}, M]` : `[${batch}, ${k}, M]`;
  if (b.rank !== l.rank || b.shape[b.rank - 2] !== k || (l.rank === 3 && b.shape[0] !== batch) || b.dtype !== 'float32') {
    throw new Error(`solveLowerTriangular: B must be float32 ${expected} for L [${l.shape.join(', ')}], got ${b.dtype} [${b.shape.join(', ')}]`);
  }
  return tf.tidy(() => tf.reshape(solveBatched(asBatch(l), asBatch(b), false), b.shape) as T);
}

/** `L⁻¹ B` (or `L⁻ᵀ B` with `transpose`) of batches `[S, K, K]`, `[S, K, M]`: the kernel. */
function solveBatched(l: tf.Tensor3D, b: tf.Tensor3D, transpose: boolean): tf.Tensor3D {
  return tf.engine().runKernel(SOLVE_LOWER_TRIANGULAR, { l, b }, { transpose }) as tf.Tensor3D;
}

/** `[S, r, c] -> [S, c, r]`. */
function transposeLast(x: Tensor): tf.Tensor3D {
  return tf.transpose(x, [0, 2, 1]) as tf.Tensor3D;
}

/** The lower triangle of each matrix of a batch (diagonal included). */
function tril(x: Tensor): tf.Tensor3D {
  return tf.linalg.bandPart(x, -1, 0) as tf.Tensor3D;
}

/** Registers the kernels' gradients (once per process; gradients are not per backend). */
function registerLinalgGradients(): void {
  registerGradientOnce({
    kernelName: CHOLESKY,
    outputsToSave: [true],
    gradFunc: (dy, saved) => {
      const [l] = saved as [tf.Tensor3D];
      return {
        a: () => {
          const x = tf.matMul(l, dy as Tensor, true, false); // Lᵀ Ḡ
          const lower = tril(x);
          const p = tf.mul(tf.add(lower, transposeLast(tf.sub(lower, tf.linalg.bandPart(x, 0, 0)))), 0.5); // Φ(Lᵀ Ḡ)
          const left = solveBatched(l, p as tf.Tensor3D, true); // L⁻ᵀ P
          return transposeLast(solveBatched(l, transposeLast(left), true)); // (L⁻ᵀ (L⁻ᵀ P)ᵀ)ᵀ = L⁻ᵀ P L⁻¹
        },
      };
    },
  });
  registerGradientOnce({
    kernelName: SOLVE_LOWER_TRIANGULAR,
    inputsToSave: ['l'],
    outputsToSave: [true],
    gradFunc: (dy, saved, attrs) => {
      const [l, x] = saved as [tf.Tensor3D, tf.Tensor3D];
      const transpose = attrs?.transpose === true;
      // L X = B: B̄ = L⁻ᵀ X̄, L̄ = −tril(B̄ Xᵀ). Lᵀ X = B: B̄ = L⁻¹ X̄, L̄ = −tril(X B̄ᵀ).
      const gb = solveBatched(l, dy as tf.Tensor3D, !transpose);
      return {
        l: () => tril(tf.neg(transpose ? tf.matMul(x, gb, false, true) : tf.matMul(gb, x, false, true))),
        b: () => gb,
      };
    },
  });
}

/** The float64 values of a kernel input. */
function hostValues(backend: HostBackend, t: tf.TensorInfo): Float64Array {
  return Float64Array.from(backend.readSync(t.dataId) as Float32Array);
}

const choleskyKernel: tf.KernelFunc = ({ inputs, backend }) => {
  const a = inputs.a as tf.TensorInfo;
  const host = backend as unknown as HostBackend;
  const [batch, k] = [a.shape[0]!, a.shape[1]!];
  const values = hostValues(host, a);
  const factors = new Float64Array(values.length);
  for (let s = 0; s < batch; s++) choleskyInto(values, factors, s * k * k, k);
  return host.makeTensorInfo(a.shape.slice(), 'float32', Float32Array.from(factors));
};

const solveKernel: tf.KernelFunc = ({ inputs, backend, attrs }) => {
  const [l, b] = [inputs.l as tf.TensorInfo, inputs.b as tf.TensorInfo];
  const host = backend as unknown as HostBackend;
  const [batch, k, m] = [b.shape[0]!, b.shape[1]!, b.shape[2]!];
  const lv = hostValues(host, l);
  const x = hostValues(host, b);
  const solve = attrs?.transpose === true ? backSubstituteTransposed : forwardSubstitute;
  for (let s = 0; s < batch; s++) solve(lv, s * k * k, x, s * k * m, k, m);
  return host.makeTensorInfo(b.shape.slice(), 'float32', Float32Array.from(x));
};

registerLinalgGradients();
for (const backendName of ['cpu', 'tensorflow']) {
  if (tf.getKernel(CHOLESKY, backendName) == null) tf.registerKernel({ kernelName: CHOLESKY, backendName, kernelFunc: choleskyKernel });
  if (tf.getKernel(SOLVE_LOWER_TRIANGULAR, backendName) == null) {
    tf.registerKernel({ kernelName: SOLVE_LOWER_TRIANGULAR, backendName, kernelFunc: solveKernel });
  }
}

/** The Cholesky factor of the `k × k` matrix at `a[o..]` into `l[o..]` (row-major; upper part 0). */
function choleskyInto(a: Float64Array, l: Float64Array, o: number, k: number): void {
  for (let j = 0; j < k; j++) {
    let d = a[o + j * k + j]!;
    for (let c = 0; c < j; c++) d -= l[o + j * k + c]! ** 2;
    if (!(d > 0)) {
      throw new Error(`cholesky: the matrix is not positive definite (pivot ${j} of ${k} is ${d}); a covariance of too few rows, or without shrinkage?`);
    }
    const pivot = Math.sqrt(d);
    l[o + j * k + j] = pivot;
    for (let i = j + 1; i < k; i++) {
      let s = a[o + i * k + j]!;
      for (let c = 0; c < j; c++) s -= l[o + i * k + c]! * l[o + j * k + c]!;
      l[o + i * k + j] = s / pivot;
    }
  }
}

/** In place: `x[xo..] := L⁻¹ x` for the `k × m` block x and lower L at `l[lo..]`. */
function forwardSubstitute(l: Float64Array, lo: number, x: Float64Array, xo: number, k: number, m: number): void {
  for (let i = 0; i < k; i++) {
    const pivot = l[lo + i * k + i]!;
    if (pivot === 0 || !Number.isFinite(pivot)) throw new Error(`solveLowerTriangular: diagonal entry ${i} of L is ${pivot}`);
    for (let c = 0; c < m; c++) {
      let s = x[xo + i * m + c]!;
      for (let j = 0; j < i; j++) s -= l[lo + i * k + j]! * x[xo + j * m + c]!;
      x[xo + i * m + c] = s / pivot;
    }
  }
}

/** In place: `x[xo..] := L⁻ᵀ x` for the `k × m` block x and lower L at `l[lo..]` (back substitution with Lᵀ). */
function backSubstituteTransposed(l: Float64Array, lo: number, x: Float64Array, xo: number, k: number, m: number): void {
  for (let i = k - 1; i >= 0; i--) {
    const pivot = l[lo + i * k + i]!;
    if (pivot === 0 || !Number.isFinite(pivot)) throw new Error(`solveLowerTriangular: diagonal entry ${i} of L is ${pivot}`);
    for (let c = 0; c < m; c++) {
      let s = x[xo + i * m + c]!;
      for (let j = i + 1; j < k; j++) s -= l[lo + j * k + i]! * x[xo + j * m + c]!;
      x[xo + i * m + c] = s / pivot;
    }
  }
}

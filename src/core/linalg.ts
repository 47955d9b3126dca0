/**
 * Dense linear algebra that tfjs lacks, as differentiable ops on small matrices (K up to a
 * few hundred): the Cholesky factor of a symmetric positive-definite matrix and the solution
 * of a lower-triangular system. Both take a matrix `[K, K]` or a batch of them `[S, K, K]`,
 * compute in float64 JS loops (O(K³) per matrix) and return float32 tensors; their backward
 * passes (`tf.customGrad`) are PyTorch's (`torch.linalg.cholesky`, `solve_triangular`), also
 * in float64.
 */
import { tf, type Tensor } from './tf.js';

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

/**
 * The lower Cholesky factor of each matrix: `A = L Lᵀ`, `[K, K] -> [K, K]` or
 * `[S, K, K] -> [S, K, K]` (zeros above the diagonal). Only the lower triangle of A is read
 * (LAPACK's convention), so A is taken to be symmetric. Throws if a matrix is not positive
 * definite (a pivot ≤ 0 or NaN).
 *
 * Backward (PyTorch's `cholesky_backward`): for the incoming gradient Ḡ of L,
 * `Ā = L⁻ᵀ Φ(Lᵀ Ḡ) L⁻¹` with `Φ(X) = ½ (tril(X) + tril(X, −1)ᵀ)`: the gradient with respect
 * to symmetric perturbations of A (a symmetric matrix), which is what any A built
 * symmetrically (a covariance) needs.
 */
export function cholesky<T extends Batched>(a: T): T {
  const { batch, k } = batchShape(a, 'cholesky', 'A');
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as T;
    const values = Float64Array.from(input.dataSync());
    const factors = new Float64Array(values.length);
    for (let s = 0; s < batch; s++) choleskyInto(values, factors, s * k * k, k);
    const gradFunc = (dy: Tensor): Tensor => {
      const g = Float64Array.from(dy.dataSync());
      const out = new Float32Array(g.length);
      for (let s = 0; s < batch; s++) choleskyBackwardInto(factors, g, out, s * k * k, k);
      return tf.tensor(out, input.shape, 'float32');
    };
    return { value: tf.tensor(Float32Array.from(factors), input.shape, 'float32'), gradFunc };
  });
  return op(a) as T;
}

/**
 * `X = L⁻¹ B` for lower-triangular L: `[K, K], [K, M] -> [K, M]` or batched
 * `[S, K, K], [S, K, M] -> [S, K, M]` (forward substitution; only the lower triangle of L is
 * read). `solveLowerTriangular(L, I)` is L⁻¹. Throws on a zero diagonal entry.
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
  const m = b.shape.at(-1)!;
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const lIn = args[0] as T;
    const bIn = args[1] as T;
    const lv = Float64Array.from(lIn.dataSync());
    const x = Float64Array.from(bIn.dataSync());
    for (let s = 0; s < batch; s++) forwardSubstitute(lv, s * k * k, x, s * k * m, k, m);
    const gradFunc = (dy: Tensor): Tensor[] => {
      const gb = Float64Array.from(dy.dataSync());
      const gl = new Float32Array(lv.length);
      for (let s = 0; s < batch; s++) {
        const lo = s * k * k;
        const bo = s * k * m;
        backSubstituteTransposed(lv, lo, gb, bo, k, m); // gb := L⁻ᵀ X̄
        for (let i = 0; i < k; i++) {
          for (let j = 0; j <= i; j++) {
            let dot = 0;
            for (let c = 0; c < m; c++) dot += gb[bo + i * m + c]! * x[bo + j * m + c]!;
            gl[lo + i * k + j] = -dot;
          }
        }
      }
      return [tf.tensor(gl, lIn.shape, 'float32'), tf.tensor(Float32Array.from(gb), bIn.shape, 'float32')];
    };
    return { value: tf.tensor(Float32Array.from(x), bIn.shape, 'float32'), gradFunc };
  });
  return op(l, b) as T;
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

/** `Ā = L⁻ᵀ Φ(Lᵀ Ḡ) L⁻¹` of one matrix (see {@link cholesky}) into `out[o..]`. */
function choleskyBackwardInto(l: Float64Array, g: Float64Array, out: Float32Array, o: number, k: number): void {
  // P = Φ(tril(Lᵀ Ḡ)): lower part of Lᵀ Ḡ (only Ḡ's lower triangle matters, as L is lower), mirrored, halved.
  const p = new Float64Array(k * k);
  for (let i = 0; i < k; i++) {
    for (let j = 0; j <= i; j++) {
      let s = 0;
      for (let c = i; c < k; c++) s += l[o + c * k + i]! * g[o + c * k + j]!; // (Lᵀ)_ic = L_ci, nonzero for c ≥ i
      p[i * k + j] = 0.5 * s;
      if (j < i) p[j * k + i] = 0.5 * s;
    }
  }
  backSubstituteTransposed(l, o, p, 0, k, k); // p := L⁻ᵀ P
  // Ā = (L⁻ᵀ P) L⁻¹ = (L⁻ᵀ (L⁻ᵀ P)ᵀ)ᵀ
  const t = new Float64Array(k * k);
  for (let i = 0; i < k; i++) for (let j = 0; j < k; j++) t[i * k + j] = p[j * k + i]!;
  backSubstituteTransposed(l, o, t, 0, k, k);
  for (let i = 0; i < k; i++) for (let j = 0; j < k; j++) out[o + i * k + j] = t[j * k + i]!;
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
    for (let c = 0; c < m; c++) {
      let s = x[xo + i * m + c]!;
      for (let j = i + 1; j < k; j++) s -= l[lo + j * k + i]! * x[xo + j * m + c]!;
      x[xo + i * m + c] = s / pivot;
    }
  }
}

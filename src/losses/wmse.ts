/**
 * The W-MSE loss (Ermolov et al. 2021; solo-learn's `WMSE` training step with `Whitening2d`
 * and `wmse_loss_func`), whitening sub-batches of the global batch.
 */
import { invalidValue } from '../core/errors.js';
import { cholesky, solveLowerTriangular } from '../core/linalg.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, gatherRows } from './global-batch.js';
import { checkPair, rowCosine } from './ops.js';

export interface WmseOptions {
  /** Rows w of each whitening sub-batch (solo-learn's `whitening_size`): N = W·B must be a multiple of w, and w > D unless eps > 0. */
  whiteningSize: number;
  /**
   * One permutation of the global batch's rows `0 .. N − 1` per whitening iteration
   * (solo-learn's `torch.randperm(bs)`, `whitening_iters` of them): sub-batch s of iteration t
   * is rows `perm_t[s·w .. s·w + w − 1]`. The caller draws them from a generator seeded the
   * same on every rank; every rank must pass the same ones.
   */
  permutations: ArrayLike<number>[];
  /** Shrinkage ε in [0, 1): the covariance used is (1 − ε)·C + ε·I (solo-learn's `whitening_eps`); default 0. */
  eps?: number;
}

/**
 * Whitening of each sub-batch by its Cholesky factor (solo-learn's `Whitening2d`):
 * `[S, w, D] -> [S, w, D]`, each row x of sub-batch s becomes `L_s⁻¹ (x − mean_s)` where
 * `L_s L_sᵀ = (1 − ε) C_s + ε I` and `C_s = Σ (x − mean_s)(x − mean_s)ᵀ / (w − 1)` `[D, D]`,
 * so each whitened sub-batch has covariance I when ε = 0. Differentiable ({@link cholesky},
 * {@link solveLowerTriangular}).
 */
export function whitenSubBatches(x: tf.Tensor3D, eps = 0): tf.Tensor3D {
  const [s, w, d] = x.shape;
  if (w < 2) throw new Error(`whitenSubBatches: needs at least 2 rows per sub-batch, got ${w}`);
  return tf.tidy(() => {
    const centred = tf.sub(x, tf.mean(x, 1, true)); // [S, w, D]
    let cov = tf.div(tf.matMul(centred, centred, true, false), w - 1) as tf.Tensor3D; // [S, D, D]
    const eye = tf.tile(tf.expandDims(tf.eye(d), 0), [s, 1, 1]) as tf.Tensor3D;
    if (eps > 0) cov = tf.add(tf.mul(cov, 1 - eps), tf.mul(eye, eps));
    const inverse = solveLowerTriangular(cholesky(cov), eye); // [S, D, D]: L⁻¹
    return tf.matMul(centred, inverse, false, true); // rows L⁻¹ x
  });
}

/**
 * W-MSE: for each whitening iteration, every view's global batch is cut into the sub-batches
 * of that iteration's permutation (the same for every view) and each sub-batch is whitened
 * ({@link whitenSubBatches}); the loss is the normalised MSE `2 − 2 cos(z_i, z_j)` between the
 * whitened embeddings of the same sample in views i < j, averaged over samples, view pairs
 * and iterations (W-MSE's `norm_mse_loss`, solo-learn's `wmse_loss_func` with
 * `simplified=False`; solo-learn's default `simplified=True` detaches z_j, which changes the
 * gradient, not the value).
 *
 * - `views`: V ≥ 2 tensors `[B, D]`, the embeddings of the V views of the same B samples.
 * - Returns the mean over this rank's B samples (and the pairs and iterations): a scalar `[]`.
 *
 * `group` (W ranks, N = W·B): the views are gathered with the differentiable
 * {@link gatherRows}, so a sub-batch mixes rows of every rank and its covariance is that of
 * the global sub-batch (whitening each rank's batch on its own, solo-learn's behaviour under
 * DDP, is another objective); the backward sums over ranks, so each rank's gradient on its rows
 * is W × the global loss's, and loss_r averages to the global loss (scale convention:
 * src/distributed/collectives.ts). One collective forward, one backward.
 */
export function wmseLoss(views: tf.Tensor2D[], options: WmseOptions, group?: ProcessGroup): Scalar {
  if (!Array.isArray(views) || views.length < 2) throw new Error(`wmseLoss: needs at least 2 views, got ${Array.isArray(views) ? views.length : typeof views}`);
  views.forEach((v, i) => checkPair('wmseLoss', ['views[0]', `views[${i}]`], views[0]!, v));
  const [b, d] = views[0]!.shape;
  const { whiteningSize: w, permutations } = options;
  const eps = options.eps ?? 0;
  if (!(Number.isFinite(eps) && eps >= 0 && eps < 1)) throw invalidValue('eps', eps, 'a number in [0, 1)');
  const layout = batchLayout('wmseLoss', b, group);
  const n = layout.globalBatch;
  if (!(Number.isInteger(w) && w >= 2 && n % w === 0)) throw invalidValue('whiteningSize', w, `an integer >= 2 dividing the global batch of ${n} rows`);
  if (eps === 0 && w <= d) throw invalidValue('whiteningSize', w, `more than D = ${d} rows (the covariance of w rows has rank w − 1), or eps > 0`);
  if (!Array.isArray(permutations) || permutations.length < 1) throw invalidValue('permutations', permutations, 'at least one permutation of the global batch');
  const orders = permutations.map((perm, t) => {
    const inverse = inversePermutation(perm, t, n); // validates perm first
    return { order: Int32Array.from(perm), inverse };
  });
  return tf.tidy(() => {
    const all = tf.split(gatherRows(tf.concat(views, 1), layout), views.length, 1) as tf.Tensor2D[]; // V × [N, D]
    const terms: Scalar[] = [];
    for (const { order, inverse } of orders) {
      const whitened = all.map((z) => {
        const subBatches = tf.reshape(permuteRows(z, order, inverse), [n / w, w, d]) as tf.Tensor3D;
        const rows = tf.reshape(whitenSubBatches(subBatches, eps), [n, d]) as tf.Tensor2D; // [N, D] in permuted order
        return tf.slice(permuteRows(rows, inverse, order), [layout.offset, 0], [b, d]); // [B, D]: this rank's samples
      });
      for (let i = 0; i < whitened.length; i++) {
        for (let j = i + 1; j < whitened.length; j++) {
          terms.push(tf.sub(2, tf.mul(2, tf.mean(rowCosine(whitened[i]!, whitened[j]!)))) as Scalar);
        }
      }
    }
    return tf.div(tf.addN(terms), terms.length) as Scalar;
  });
}

/**
 * Rows of `x` reordered, `[N, D] -> [N, D]`, row p = x[order[p]]; `inverse` is the inverse
 * permutation, which the backward pass gathers with (tfjs's own gather gradient, a segment
 * sum, takes seconds for a few hundred rows on the CPU backend).
 */
function permuteRows(x: tf.Tensor2D, order: Int32Array, inverse: Int32Array): tf.Tensor2D {
  const op = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as tf.Tensor2D;
    return { value: tf.gather(input, tf.tensor1d(order, 'int32')), gradFunc: (dy: tf.Tensor) => tf.gather(dy, tf.tensor1d(inverse, 'int32')) };
  });
  return op(x) as tf.Tensor2D;
}

/** The inverse of permutation `perm` of 0 .. n − 1 (validated; `t` names it in the error): sample → its position. */
function inversePermutation(perm: ArrayLike<number>, t: number, n: number): Int32Array {
  const where = new Int32Array(n).fill(-1);
  if (perm?.length === n) {
    for (let p = 0; p < n; p++) {
      const row = perm[p]!;
      if (!(Number.isInteger(row) && row >= 0 && row < n) || where[row] !== -1) break;
      where[row] = p;
    }
  }
  if (where.includes(-1)) throw invalidValue(`permutations[${t}]`, Array.from(perm ?? []).slice(0, 8), `a permutation of 0 .. ${n - 1} (the global batch)`);
  return where;
}

/**
 * The MMCR loss (Yerxa et al. 2023; the official `mmcr/cifar_stl/loss_mmcr.py`, lightly's `MMCRLoss`).
 */
import { invalidValue } from '../core/errors.js';
import { gramOfColumns, nuclearNorm, traceSqrtPsd } from '../core/eigen.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, reduceValuesOverRanks, sumValuesOverRanksExact, type BatchLayout } from './global-batch.js';
import { checkPair, l2NormalizeRows } from './ops.js';

export interface MmcrOptions {
  /** Weight λ ≥ 0 of the mean per-sample nuclear norm (the official CIFAR recipe: 0; lightly: 0.005). */
  lambda: number;
}

/**
 * Maximum manifold capacity: `λ · mean_i ‖Z_i‖_* − ‖C‖_*`, where each view's rows are
 * L2-normalised, `Z_i` `[D, V]` stacks sample i's V normalised views, and the centroid matrix
 * `C` `[N, D]` holds their means `c_i = mean_v ẑ_{v,i}` over the GLOBAL batch of N samples
 * (‖·‖_*: the nuclear norm, the sum of singular values).
 *
 * - `views`: V ≥ 2 tensors `[B, D]`, the projections of this rank's B samples, one per view.
 * - Returns a scalar `[]`.
 *
 * One rank: `‖C‖_*` and its gradient `U Vᵀ` come from {@link nuclearNorm}'s kernel, on the
 * device. `group`: `‖C‖_*` is the global centroid matrix's on every rank: each rank's float64 Gram
 * matrix `C_rᵀ C_r` `[D, D]` is summed over the ranks exactly (`sumValuesOverRanksExact`: one
 * all-gather), its eigenvalues give the singular values (`src/core/eigen.ts`), and the backward
 * pass sums the incoming gradient over the ranks (one all-reduce of a scalar) and returns
 * `dy · C_r (CᵀC)^{+1/2}`, this rank's rows of the gradient `U Vᵀ` times that sum. The local
 * term averages over rank r's rows (no collective), so mean_r loss_r is the global loss.
 * The official code gathers the centroids without gradient for the other ranks' rows (a
 * gradient the world size too small after DDP's averaging); lightly's is per GPU.
 */
export function mmcrLoss(views: tf.Tensor2D[], options: MmcrOptions, group?: ProcessGroup): Scalar {
  if (!Array.isArray(views) || views.length < 2) throw new Error(`mmcrLoss: needs V >= 2 views, got ${Array.isArray(views) ? views.length : typeof views}`);
  views.forEach((v, i) => checkPair('mmcrLoss', ['views[0]', `views[${i}]`], views[0]!, v));
  const { lambda } = options;
  if (!(Number.isFinite(lambda) && lambda >= 0)) throw invalidValue('lambda', lambda, 'a number >= 0');
  const layout = batchLayout('mmcrLoss', views[0]!.shape[0], group);
  return tf.tidy(() => {
    const normalised = views.map((v) => l2NormalizeRows(v));
    const centroids = tf.div(tf.addN(normalised), views.length) as tf.Tensor2D; // [B, D]
    const capacity = tf.neg(globalNuclearNorm(centroids, layout));
    if (lambda === 0) return capacity as Scalar;
    const local = tf.mean(nuclearNorm(tf.stack(normalised, 2) as tf.Tensor3D)); // mean_i ‖Z_i‖_* over rank r's rows
    return tf.add(capacity, tf.mul(local, lambda)) as Scalar;
  });
}

/** `‖C‖_*` of the global batch's rows (this rank's: `rows` `[B, D]`), differentiable as {@link mmcrLoss} says. */
function globalNuclearNorm(rows: tf.Tensor2D, layout: BatchLayout): Scalar {
  if (layout.worldSize === 1) return nuclearNorm(rows); // on the device, nothing read back
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as tf.Tensor2D;
    const [b, d] = input.shape;
    const data = input.dataSync();
    const gram = sumValuesOverRanksExact(gramOfColumns(data, b, d), layout);
    const { trace, inverseSqrt } = traceSqrtPsd(gram, d);
    // This rank's rows of U Vᵀ = C (CᵀC)^{+1/2}, in float64.
    const direction = new Float32Array(b * d);
    for (let i = 0; i < b; i++) {
      for (let j = 0; j < d; j++) {
        let sum = 0;
        for (let k = 0; k < d; k++) sum += data[i * d + k]! * inverseSqrt[k * d + j]!;
        direction[i * d + j] = sum;
      }
    }
    const value = tf.scalar(trace);
    const gradFunc = (dy: Tensor): Tensor => {
      const rows = tf.tensor2d(direction, [b, d]);
      const total = reduceValuesOverRanks(Float64Array.from(dy.dataSync()), layout, 'sum')[0]!;
      return tf.mul(rows, total);
    };
    return { value, gradFunc };
  });
  return op(rows) as Scalar;
}

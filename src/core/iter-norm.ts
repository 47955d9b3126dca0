/**
 * Iterative normalisation (IterNorm, Huang et al. 2019), VIbCReg's last projector layer:
 * group whitening by Newton-Schulz iterations, as in VIbCReg's and solo-learn's code
 * (`solo/utils/whitening.py`).
 */
import { withoutGradientTape } from './layers.js';
import { Layer } from './module.js';
import { tf, type Tensor, type Variable } from './tf.js';

type Tensor3D = tf.Tensor3D;

export interface IterNormOptions {
  /** Groups the features are whitened in (solo-learn's `num_groups`, default 64; adjusted so it divides, see {@link iterNormGroups}). */
  numGroups?: number;
  /** Newton-Schulz iterations T (default 5). */
  iterations?: number;
  /** Added to the covariance's diagonal (default 1e-5). */
  eps?: number;
  /** Weight of the batch in the running statistics (default 0.1). */
  momentum?: number;
  /** Per-feature scale and shift after the whitening (default true). */
  affine?: boolean;
}

/** Statistics of one group-whitening call: `mean` `[G, d, 1]` and biased `covariance` `[G, d, d]` over `count` samples. */
export interface GroupMoments {
  mean: Tensor3D;
  covariance: Tensor3D;
  count: number;
}

/**
 * solo-learn's grouping of `numFeatures` features: d = ceil(F / numGroups) channels per group,
 * halved until it divides F; then G = F / d groups.
 */
export function iterNormGroups(numFeatures: number, numGroups: number): { groups: number; groupSize: number } {
  if (!(Number.isInteger(numFeatures) && numFeatures >= 1)) throw new Error(`IterNorm: numFeatures must be an integer >= 1, got ${numFeatures}`);
  if (!(Number.isInteger(numGroups) && numGroups >= 1)) throw new Error(`IterNorm: numGroups must be an integer >= 1, got ${numGroups}`);
  let groupSize = Math.floor((numFeatures - 1) / numGroups) + 1;
  while (numFeatures % groupSize !== 0) groupSize = Math.floor(groupSize / 2);
  return { groups: numFeatures / groupSize, groupSize };
}

/**
 * IterNorm on `[B, F] -> [B, F]`: the features are cut into G groups of d consecutive ones;
 * each group is centred and multiplied by an approximation of Σ^(−1/2), where
 * `Σ = cov + eps·I` (`cov` the biased covariance over the batch, `[d, d]`): with
 * `Σ_N = Σ / tr(Σ)`, `P_0 = I`, `P_{k+1} = 1.5 P_k − 0.5 P_k³ Σ_N` for T iterations,
 * the whitening matrix is `P_T / sqrt(tr(Σ))`. Then `y · weight + bias` per feature.
 *
 * - Training mode uses the batch's statistics from {@link groupMoments} (gradients flow through
 *   them and the iterations: autograd gives the gradient solo-learn's hand-written backward
 *   computes) and updates `running = (1 − momentum) · running + momentum · batch` for the mean
 *   and for the whitening matrix, off the gradient tape.
 * - Evaluation mode applies `runningWm` to `x − runningMean`.
 *
 * Parameters `weight` (ones), `bias` (zeros) `[F]`; buffers `runningMean` `[G, d, 1]` (zeros)
 * and `runningWm` `[G, d, d]` (identities). Subclasses (synchronised IterNorm) override only
 * {@link groupMoments}.
 */
export class IterNorm extends Layer {
  readonly groups: number;
  readonly groupSize: number;
  readonly iterations: number;
  readonly eps: number;
  readonly momentum: number;
  readonly weight: Variable | undefined;
  readonly bias: Variable | undefined;
  readonly runningMean: Variable;
  readonly runningWm: Variable;

  constructor(
    readonly numFeatures: number,
    options: IterNormOptions = {},
  ) {
    super();
    const { groups, groupSize } = iterNormGroups(numFeatures, options.numGroups ?? 64);
    this.groups = groups;
    this.groupSize = groupSize;
    this.iterations = options.iterations ?? 5;
    if (!(Number.isInteger(this.iterations) && this.iterations >= 1)) throw new Error(`IterNorm: iterations must be an integer >= 1, got ${this.iterations}`);
    this.eps = options.eps ?? 1e-5;
    this.momentum = options.momentum ?? 0.1;
    const affine = options.affine ?? true;
    this.weight = affine ? this.addParameter('weight', tf.ones([numFeatures])) : undefined;
    this.bias = affine ? this.addParameter('bias', tf.zeros([numFeatures])) : undefined;
    this.runningMean = this.addBuffer('runningMean', tf.zeros([groups, groupSize, 1]));
    this.runningWm = this.addBuffer('runningWm', tf.tile(tf.expandDims(tf.eye(groupSize), 0), [groups, 1, 1]));
  }

  /** `[B, F] -> [B, F]`. */
  forward(x: Tensor): Tensor {
    if (x.rank !== 2 || x.shape[1] !== this.numFeatures) throw new Error(`IterNorm expects [B, ${this.numFeatures}], got shape [${x.shape}]`);
    const [b] = x.shape as [number, number];
    return tf.tidy(() => {
      const grouped = tf.transpose(tf.reshape(x, [b, this.groups, this.groupSize]), [1, 2, 0]) as Tensor3D; // [G, d, B]
      let centred: Tensor3D;
      let whitening: Tensor3D;
      if (this.training) {
        const { mean, covariance } = this.groupMoments(grouped);
        centred = tf.sub(grouped, mean);
        whitening = this.whiteningMatrix(covariance);
        this.updateRunningStats(mean, whitening);
      } else {
        centred = tf.sub(grouped, this.runningMean);
        whitening = this.runningWm as unknown as Tensor3D;
      }
      const whitened = tf.matMul(whitening, centred); // [G, d, B]
      const y = tf.reshape(tf.transpose(whitened, [2, 0, 1]), [b, this.numFeatures]);
      return this.weight && this.bias ? tf.add(tf.mul(y, this.weight), this.bias) : y;
    });
  }

  /**
   * Per-group mean `[G, d, 1]` and biased covariance `[G, d, d]` of `x` `[G, d, B]` over its
   * B samples, differentiable. Override to compute them over more samples (all ranks).
   */
  protected groupMoments(x: Tensor3D): GroupMoments {
    const count = x.shape[2];
    const mean = tf.mean(x, 2, true) as Tensor3D;
    const centred = tf.sub(x, mean);
    return { mean, covariance: tf.div(tf.matMul(centred, centred, false, true), count) as Tensor3D, count };
  }

  /** Newton-Schulz approximation of `(covariance + eps·I)^(−1/2)`, `[G, d, d]` (see the class comment). */
  private whiteningMatrix(covariance: Tensor3D): Tensor3D {
    const eye = tf.tile(tf.expandDims(tf.eye(this.groupSize), 0), [this.groups, 1, 1]) as Tensor3D;
    const sigma = tf.add(covariance, tf.mul(eye, this.eps));
    const reciprocalTrace = tf.reciprocal(tf.sum(tf.mul(sigma, eye), [1, 2], true)); // [G, 1, 1]
    const normalised = tf.mul(sigma, reciprocalTrace) as Tensor3D;
    let p = eye;
    for (let k = 0; k < this.iterations; k++) {
      const cube = tf.matMul(tf.matMul(p, p), p);
      p = tf.sub(tf.mul(p, 1.5), tf.mul(tf.matMul(cube, normalised), 0.5));
    }
    return tf.mul(p, tf.sqrt(reciprocalTrace));
  }

  private updateRunningStats(mean: Tensor3D, whitening: Tensor3D): void {
    const m = this.momentum;
    withoutGradientTape(() =>
      tf.tidy(() => {
        this.runningMean.assign(tf.add(tf.mul(this.runningMean, 1 - m), tf.mul(mean, m)));
        this.runningWm.assign(tf.add(tf.mul(this.runningWm, 1 - m), tf.mul(whitening, m)));
      }),
    );
  }
}

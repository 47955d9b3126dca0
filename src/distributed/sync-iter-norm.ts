/**
 * Synchronised IterNorm: group whitening with the statistics of the global batch of all
 * ranks (docs/design.md contract 4), as SyncBatchNorm for batch norm.
 */
import { IterNorm, type GroupMoments, type IterNormOptions } from '../core/iter-norm.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Tensor } from '../core/tf.js';
import { allGather } from './collectives.js';

type Tensor3D = tf.Tensor3D;

/**
 * {@link IterNorm} whose training-mode mean and covariance are those of the global batch over
 * every rank of `group`: `[B, F] -> [B, F]`, the layer one process would apply to the
 * concatenation of all ranks' inputs (so is the whitening matrix, and the running statistics).
 *
 * How (one collective forward, one backward, per call): each rank computes per group its mean
 * `mean_r` `[d]`, its centred scatter `M2_r = Σ (x − mean_r)(x − mean_r)ᵀ` `[d, d]` and its
 * count n_r; `[mean_r, M2_r, n_r]` is all-gathered (differentiable `allGather`) and every rank
 * combines the W rows identically (Chan et al.'s parallel covariance):
 * `mean = Σ n_r·mean_r / n`, `cov = (Σ M2_r + Σ n_r (mean_r − mean)(mean_r − mean)ᵀ) / n`.
 * The gather's backward (reduce-scatter SUM) gives each rank the gradient of every rank's loss
 * through the statistics, as SyncBatchNorm's (scale convention: src/distributed/collectives.ts).
 * With a group of one process it is exactly {@link IterNorm}.
 */
export class SyncIterNorm extends IterNorm {
  constructor(
    numFeatures: number,
    options: IterNormOptions,
    readonly group: ProcessGroup,
  ) {
    super(numFeatures, options);
  }

  /** A SyncIterNorm with `layer`'s configuration, a copy of its parameters (trainable flags included) and buffers, and its mode. */
  static fromIterNorm(layer: IterNorm, group: ProcessGroup): SyncIterNorm {
    const sync = new SyncIterNorm(
      layer.numFeatures,
      { numGroups: layer.groups, iterations: layer.iterations, eps: layer.eps, momentum: layer.momentum, affine: layer.weight !== undefined },
      group,
    );
    sync.loadStateDict(layer.stateDict());
    if (layer.weight && sync.weight) sync.weight.trainable = layer.weight.trainable;
    if (layer.bias && sync.bias) sync.bias.trainable = layer.bias.trainable;
    sync.training = layer.training;
    return sync;
  }

  /** Global-batch mean `[G, d, 1]` and biased covariance `[G, d, d]` of `x` `[G, d, B]` (see the class comment). */
  protected override groupMoments(x: Tensor3D): GroupMoments {
    if (this.group.worldSize === 1) return super.groupMoments(x);
    const [g, d, localCount] = x.shape;
    const localMean = tf.mean(x, 2, true); // [G, d, 1]
    const centred = tf.sub(x, localMean);
    const scatter = tf.matMul(centred, centred, false, true); // [G, d, d]
    const packed = tf.concat([tf.reshape(localMean, [1, g * d]), tf.reshape(scatter, [1, g * d * d]), tf.tensor2d([[localCount]])], 1);
    const all = allGather(packed, this.group); // [W, G·d + G·d² + 1]
    const [means, scatters, counts] = tf.split(all, [g * d, g * d * d, 1], 1) as [Tensor, Tensor, Tensor];
    const count = (counts.dataSync() as Float32Array).reduce((s, n) => s + n, 0);
    const w = this.group.worldSize;
    const rankMeans = tf.reshape(means, [w, g, d, 1]);
    const rankCounts = tf.reshape(counts, [w, 1, 1, 1]);
    const mean = tf.div(tf.sum(tf.mul(rankMeans, rankCounts), 0), count) as Tensor3D; // [G, d, 1]
    const offsets = tf.sub(rankMeans, mean); // [W, G, d, 1]
    const flatOffsets = tf.reshape(offsets, [w * g, d, 1]);
    const outer = tf.reshape(tf.matMul(flatOffsets, flatOffsets, false, true), [w, g, d, d]); // (mean_r − mean)(mean_r − mean)ᵀ
    const between = tf.sum(tf.mul(outer, rankCounts), 0); // [G, d, d]
    const covariance = tf.div(tf.add(tf.sum(tf.reshape(scatters, [w, g, d, d]), 0), between), count) as Tensor3D;
    return { mean, covariance, count };
  }
}

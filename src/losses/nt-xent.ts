/**
 * NT-Xent, the SimCLR loss (Chen et al. 2020; solo-learn's `simclr_loss_func`).
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, gatherRows, type BatchLayout } from './global-batch.js';
import { ntXentLossTiled } from './nt-xent-tiled.js';
import { checkPair, l2NormalizeRows } from './ops.js';

export interface NtXentOptions {
  /** Softmax temperature τ > 0. */
  temperature: number;
  /**
   * Compute in tiles (`ntXentLossTiled`: same values and gradients, O(N·D) memory) instead
   * of materialising the `[2B, 2N]` logits. Default: tiled exactly when 2B·2N exceeds
   * {@link NT_XENT_TILED_THRESHOLD}. `true` / `false` force either (tests, benchmarks).
   */
  tiled?: boolean;
  /** Tile side for the tiled computation (default `NT_XENT_DEFAULT_TILE_SIZE`, 1024). */
  tileSize?: number;
}

/**
 * Above this many logits (2B·2N elements; 4096², i.e. 64 MiB of float32 per `[2B, 2N]`
 * matrix, of which the plain loss keeps several alive for its backward pass),
 * `ntXentLoss` switches to the tiled computation unless `tiled` says otherwise.
 */
export const NT_XENT_TILED_THRESHOLD = 4096 * 4096;

/** solo-learn's default: τ = 0.1. */
export const NT_XENT_DEFAULTS: Readonly<NtXentOptions> = Object.freeze({ temperature: 0.1 });

/**
 * Logit given to an anchor's own column before the softmax: exp(MASKED_LOGIT − max) is exactly
 * 0 in float32, so the masked entry drops out of the normaliser, and `tf.where` sends it an
 * exactly zero gradient (no −∞, no NaN).
 */
export const MASKED_LOGIT = -1e9;

/**
 * NT-Xent (normalised temperature-scaled cross-entropy).
 *
 * - `z1`, `z2`: `[B, D]`, the two views' embeddings of the same B samples (row i of each).
 * - Rows are L2-normalised; anchors are `[z1; z2]` `[2B, D]`; candidates are the gathered
 *   `[Z1; Z2]` `[2N, D]` (N = W·B; with one process candidates = anchors).
 * - logits `[2B, 2N]` = anchors · candidatesᵀ / τ; for local row i (view 1) the positive is
 *   global column N + offset + i and the self column offset + i; for row B + i (view 2) the
 *   positive is offset + i and the self column N + offset + i (offset = rank·B).
 * - Returns the mean over the 2B local anchors of the cross-entropy: a scalar `[]`.
 *
 * `group` (W > 1): candidates are gathered with `gatherRows` (differentiable all-gather whose
 * backward sums over ranks), so each rank's gradient on its rows is W × the global loss's;
 * DDP's averaging divides it back out (scale convention: src/distributed/collectives.ts).
 * Two collectives forward (one per view), two backward.
 *
 * Above {@link NT_XENT_TILED_THRESHOLD} logits (or with `tiled: true`) this delegates to
 * `ntXentLossTiled` (src/losses/nt-xent-tiled.ts): same values and gradients to float32
 * round-off, memory O(N·D + tileSize²) instead of O(B·N).
 */
export function ntXentLoss(z1: tf.Tensor2D, z2: tf.Tensor2D, options: NtXentOptions = NT_XENT_DEFAULTS, group?: ProcessGroup): Scalar {
  checkPair('ntXentLoss', ['z1', 'z2'], z1, z2);
  const { temperature } = options;
  if (!(Number.isFinite(temperature) && temperature > 0)) {
    throw invalidValue('temperature', temperature, 'a number > 0');
  }
  const layout = batchLayout('ntXentLoss', z1.shape[0], group);
  const tiled = options.tiled ?? 4 * layout.localBatch * layout.globalBatch > NT_XENT_TILED_THRESHOLD;
  if (tiled) return ntXentLossTiled(z1, z2, { temperature, tileSize: options.tileSize }, group);
  return tf.tidy(() => {
    const n1 = l2NormalizeRows(z1);
    const n2 = l2NormalizeRows(z2);
    const anchors = tf.concat([n1, n2], 0); // [2B, D]
    const candidates = tf.concat([gatherRows(n1, layout), gatherRows(n2, layout)], 0); // [2N, D]
    const logits = tf.div(tf.matMul(anchors, candidates, false, true), temperature); // [2B, 2N]
    const { self, positive } = ntXentMasks(layout);
    const masked = tf.where(self, tf.fill(logits.shape, MASKED_LOGIT), logits);
    const logProb = tf.logSoftmax(masked, 1); // [2B, 2N]
    const perAnchor = tf.sum(tf.mul(logProb, positive), 1); // [2B]: log p(positive)
    return tf.neg(tf.mean(perAnchor)) as Scalar;
  });
}

/**
 * The self and positive masks of the local-anchor × global-candidate logits, `[2B, 2N]`
 * each (`self` bool, `positive` float32 one-hot), from the rank offset. Exported for tests.
 */
export function ntXentMasks(layout: BatchLayout): { self: tf.Tensor2D; positive: tf.Tensor2D } {
  const { localBatch: b, globalBatch: n, offset } = layout;
  const selfCols: number[] = [];
  const positiveCols: number[] = [];
  for (let i = 0; i < b; i++) {
    selfCols.push(offset + i);
    positiveCols.push(n + offset + i);
  }
  for (let i = 0; i < b; i++) {
    selfCols.push(n + offset + i);
    positiveCols.push(offset + i);
  }
  return tf.tidy(() => ({
    self: tf.cast(tf.oneHot(tf.tensor1d(selfCols, 'int32'), 2 * n), 'bool') as tf.Tensor2D,
    positive: tf.cast(tf.oneHot(tf.tensor1d(positiveCols, 'int32'), 2 * n), 'float32') as tf.Tensor2D,
  }));
}

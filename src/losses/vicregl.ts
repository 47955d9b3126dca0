/**
 * The VICRegL loss (Bardes, Ponce, LeCun 2022, "VICRegL: Self-Supervised Learning of Local
 * Visual Features"; the reference implementation's `VICRegL.global_loss` and `local_loss` in
 * `VICRegL/main_vicregl.py`): VICReg on the pooled embeddings plus VICReg on the feature maps'
 * locations matched by nearest neighbours in feature space and in the source image, every
 * variance and covariance over the global batch.
 */
import { invalidValue } from '../core/errors.js';
import { withoutGradientTape } from '../core/layers.js';
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar } from '../core/tf.js';
import { batchLayout, type BatchLayout } from './global-batch.js';
import { checkPair } from './ops.js';
import { covarianceStatistics, viewStatistics } from './vicreg.js';

export interface VicreglOptions {
  /** Weight α of the global loss; the local one gets 1 − α (the reference: 0.75). */
  alpha?: number;
  /** Weight of the invariance (MSE) terms (25). */
  invWeight?: number;
  /** Weight of the variance (hinge on the standard deviation) terms (25). */
  varWeight?: number;
  /** Weight of the covariance terms (1). */
  covWeight?: number;
  /**
   * Locations kept by the location-based matching, [from view i to j, from j to i] (the
   * reference's `num_matches`: [20, 4]); by the feature matching too unless {@link l2AllMatches}.
   */
  numMatches?: readonly [number, number];
  /** Whether the feature matching keeps every location (the reference's `l2_all_matches`, 1 by default) rather than `numMatches`. */
  l2AllMatches?: boolean;
  /**
   * Per view, `[B, L_v, 2]`: where each location of its map lies in the source image (row,
   * column, in pixels; see `mapLocations` in src/methods/vicregl.ts), for the location-based
   * matching. Without them only the feature matching runs.
   */
  locations?: Float32Array[];
}

/** The reference implementation's defaults (`main_vicregl.py`'s arguments). */
export const VICREGL_DEFAULTS: Readonly<Required<Omit<VicreglOptions, 'locations'>>> = Object.freeze({
  alpha: 0.75,
  invWeight: 25,
  varWeight: 25,
  covWeight: 1,
  numMatches: [20, 4] as const,
  l2AllMatches: true,
});

/** The loss and its two weighted-before-α parts (scalars `[]`). */
export interface VicreglResult {
  /** `α · global + (1 − α) · local`. */
  loss: Scalar;
  /** VICReg of the embeddings: invariance over the pairs (i < 2, j ≠ i), variance and covariance of every view. */
  global: Scalar;
  /** VICReg of the matched feature-map locations (by features, and by position when given), mean over the pairs (i < 2, j ≠ i). */
  local: Scalar;
}

/** std = sqrt(var + eps) as the reference's. */
const EPS = 1e-4;

/**
 * VICRegL. With V ≥ 2 views, views 0 and 1 the global crops, the pairs are (i, j), i < 2,
 * j ≠ i, and
 * - `global = invWeight · mean_pairs MSE(e_i, e_j) + varWeight · mean_v mean_d relu(1 − std_d(e_v))
 *   + covWeight · mean_v Σ_{c≠d} C_v,cd² / D` (the VICReg terms of every view);
 * - `local = mean_pairs [½ (T(F(m_i → m_j)) + T(F(m_j → m_i))) + ½ (T(P(m_i → m_j)) + T(P(m_j → m_i)))]`:
 *   F matches each location of `m_i` with its nearest location of the same sample in `m_j` (L2
 *   distance of the features) and keeps every such pair (`l2AllMatches`) or the
 *   `numMatches[0]` closest (`numMatches[1]` the other way), in location order; P does the same
 *   with the distance between the locations' positions in the source image (`locations`) and
 *   always keeps `numMatches`; without `locations` the P half is absent. Ties go to the lower
 *   location index (nearest) and the lower input location (kept).
 *   `T(x, y) = invWeight · MSE(x, y) + varWeight · ½ (hinge(x) + hinge(y)) + covWeight · ½ (cov(x) + cov(y))`
 *   on the matched `[B, M, C]` pairs, where hinge is the mean over (m, c) of relu(1 − std) and
 *   cov the mean over m of `Σ_{c≠d} C_m,cd² / C`, the statistics of location m over the batch.
 *
 * - `embeddings`: V tensors `[B, D]` (the expander's outputs).
 * - `maps`: V tensors `[B, L_v, C]` (the maps projector's outputs at the L_v locations of view
 *   v's feature map, row-major).
 * - Returns the loss and its global and local parts.
 *
 * `group` (W ranks, N = W·B): the MSE terms are means over this rank's rows; every variance
 * and covariance is that of the global batch ({@link viewStatistics} and
 * {@link covarianceStatistics} of src/losses/vicreg.ts: column sums and cross-products
 * all-reduced, two all-reduces forward and two backward for the embeddings, as many for every
 * matched location together), so every rank gets the global statistics. The matching is per
 * sample (no collective): by features on the device, by positions on the host (they are host
 * arrays). The reference gathers the maps (`gather_center`), so its statistics are
 * global too; its `local_loss` keeps only the last pair's terms (it assigns instead of adding)
 * and divides them by the number of pairs; here every pair counts.
 */
export function vicreglLoss(embeddings: tf.Tensor2D[], maps: tf.Tensor3D[], options: VicreglOptions = {}, group?: ProcessGroup): VicreglResult {
  if (!Array.isArray(embeddings) || embeddings.length < 2)
    throw new Error(`vicreglLoss: needs the embeddings of at least 2 views, got ${Array.isArray(embeddings) ? embeddings.length : typeof embeddings}`);
  if (!Array.isArray(maps) || maps.length !== embeddings.length)
    throw new Error(`vicreglLoss: needs one feature map per view (${embeddings.length}), got ${Array.isArray(maps) ? maps.length : typeof maps}`);
  embeddings.forEach((e, v) => checkPair('vicreglLoss', ['embeddings[0]', `embeddings[${v}]`], embeddings[0]!, e));
  const b = embeddings[0]!.shape[0];
  maps.forEach((m, v) => {
    if (m.rank !== 3 || m.shape[0] !== b || m.shape[2] !== maps[0]!.shape[2] || m.shape[1] < 1) {
      throw new Error(`vicreglLoss: maps[${v}] must be [${b}, L, ${maps[0]!.shape[2]}] (L >= 1), got shape [${m.shape.join(', ')}]`);
    }
  });
  const o = { ...VICREGL_DEFAULTS, ...options };
  if (!(Number.isFinite(o.alpha) && o.alpha >= 0 && o.alpha <= 1)) throw invalidValue('alpha', o.alpha, 'a number in [0, 1]');
  for (const [field, value] of [
    ['invWeight', o.invWeight],
    ['varWeight', o.varWeight],
    ['covWeight', o.covWeight],
  ] as const) {
    if (!(Number.isFinite(value) && value >= 0)) throw invalidValue(field, value, 'a number >= 0');
  }
  if (!o.numMatches.every((k) => Number.isInteger(k) && k >= 1)) throw invalidValue('numMatches', o.numMatches.join(','), 'two integers >= 1');
  const locations = options.locations;
  if (locations !== undefined) {
    if (!Array.isArray(locations) || locations.length !== maps.length)
      throw new Error(`vicreglLoss: needs the locations of every view (${maps.length}), got ${Array.isArray(locations) ? locations.length : typeof locations}`);
    locations.forEach((p, v) => {
      if (!(p instanceof Float32Array) || p.length !== b * maps[v]!.shape[1] * 2)
        throw new Error(`vicreglLoss: locations[${v}] must be a Float32Array [${b}, ${maps[v]!.shape[1]}, 2]`);
    });
  }
  const layout = batchLayout('vicreglLoss', b, group);
  if (layout.globalBatch < 2) throw invalidValue('batch size', layout.globalBatch, 'at least 2 samples for VICRegL (unbiased variance)');
  const pairs = embeddings.flatMap((_, i) => (i < 2 ? embeddings.map((__, j) => [i, j] as const).filter(([, j]) => j !== i) : []));
  return tf.tidy(() => {
    const inv = tf.div(tf.addN(pairs.map(([i, j]) => tf.mean(tf.squaredDifference(embeddings[i]!, embeddings[j]!)))), pairs.length);
    const stats = viewStatistics(embeddings, 1, EPS, layout);
    const d = embeddings[0]!.shape[1];
    const variance = tf.div(tf.addN(stats.map((s) => s.varianceHinge)), stats.length);
    const covariance = tf.div(tf.addN(stats.map((s) => s.offDiagonal)), stats.length * d);
    const global = tf.addN([tf.mul(inv, o.invWeight), tf.mul(variance, o.varWeight), tf.mul(covariance, o.covWeight)]) as Scalar;
    // Both directions of every pair, by features and by position, then the statistics of all their locations from one pair of collectives.
    const all = (m: tf.Tensor3D) => (o.l2AllMatches ? m.shape[1] : undefined);
    const matches = pairs.flatMap(([i, j]) => [
      matchOnFeatures(maps[i]!, maps[j]!, all(maps[i]!) ?? o.numMatches[0]),
      matchOnFeatures(maps[j]!, maps[i]!, all(maps[j]!) ?? o.numMatches[1]),
      ...(locations
        ? [
            matchOnPositions(maps[i]!, maps[j]!, locations[i]!, locations[j]!, o.numMatches[0]),
            matchOnPositions(maps[j]!, maps[i]!, locations[j]!, locations[i]!, o.numMatches[1]),
          ]
        : []),
    ]);
    const local = tf.div(tf.addN(matchedTerms(matches, o, layout)), 2 * pairs.length) as Scalar; // mean over pairs of each matching's directions' mean, summed
    const loss = tf.add(tf.mul(global, o.alpha), tf.mul(local, 1 - o.alpha)) as Scalar;
    return { loss, global, local };
  });
}

/**
 * For each location of `input` `[B, L, C]` its nearest location of the same sample in
 * `candidate` `[B, L', C]` (L2 distance of the features, detached), the `min(k, L)` closest of
 * these pairs kept, in location order: `[B, M, C]` input rows and `[B, M, C]` their neighbours
 * (gathered with their gradient). As the reference's `neirest_neighbores_on_l2`; the same
 * choices as {@link selectMatches} (ties to the lower index), made on the device: nothing is
 * read back (a browser's WebGPU has no synchronous read).
 */
function matchOnFeatures(input: tf.Tensor3D, candidate: tf.Tensor3D, k: number): [tf.Tensor3D, tf.Tensor3D] {
  const [b, l, c] = input.shape;
  const lc = candidate.shape[1];
  const m = Math.min(k, l);
  const rows = (t: tf.Tensor3D, index: tf.Tensor) => tf.reshape(tf.gather(tf.reshape(t, [-1, c]), tf.reshape(index, [-1])), [b, m, c]) as tf.Tensor3D;
  // The choices, off the tape (tfjs would differentiate the gathers with respect to their int32 indices):
  // `kept` `[B, M]` rows of [B·L] (when M < L), `neighbours` `[B, M]` rows of [B·L'].
  const { kept, neighbours } = withoutGradientTape(() =>
    tf.tidy(() => {
      const [x, y] = [input, candidate];
      // Squared distances [B, L, L']: |x|² + |y|² − 2 x·yᵀ.
      const d2 = tf.sub(tf.add(tf.sum(tf.square(x), 2, true), tf.transpose(tf.sum(tf.square(y), 2, true), [0, 2, 1])), tf.mul(tf.matMul(x, y, false, true), 2));
      const nearest = tf.argMin(d2, 2) as tf.Tensor2D; // [B, L], the first of equal distances
      const sampleStart = (width: number) => tf.reshape(tf.mul(tf.range(0, b, 1, 'int32'), tf.scalar(width, 'int32')), [b, 1]); // [B, 1]
      if (m === l) return { kept: undefined, neighbours: tf.add(nearest, sampleStart(lc)) };
      // The m smallest distances (topk of their negation: the lower location first on ties), then in location order.
      const chosen = tf.topk(tf.neg(tf.min(d2, 2)), m).indices; // [B, M]
      const kept = tf.add(tf.cast(tf.neg(tf.topk(tf.neg(tf.cast(chosen, 'float32')), m).values), 'int32'), sampleStart(l)); // [B, M] ascending
      const neighbour = tf.reshape(tf.gather(tf.reshape(nearest, [-1]), tf.reshape(kept, [-1])), [b, m]);
      return { kept, neighbours: tf.add(neighbour, sampleStart(lc)) };
    }),
  );
  return [kept ? rows(input, kept) : input, rows(candidate, neighbours)];
}

/**
 * As {@link matchOnFeatures}, the distance being that between the locations' positions in the
 * source image (`inputAt` `[B, L, 2]`, `candidateAt` `[B, L', 2]`, host values, squared
 * distances in float64): the reference's `neirest_neighbores_on_location`.
 */
function matchOnPositions(input: tf.Tensor3D, candidate: tf.Tensor3D, inputAt: Float32Array, candidateAt: Float32Array, k: number): [tf.Tensor3D, tf.Tensor3D] {
  const [b, l] = input.shape;
  const lc = candidate.shape[1];
  return gatherMatches(
    input,
    candidate,
    selectMatches(b, l, lc, k, (s, i, j) => {
      const p = (s * l + i) * 2;
      const q = (s * lc + j) * 2;
      const dr = inputAt[p]! - candidateAt[q]!;
      const dc = inputAt[p + 1]! - candidateAt[q + 1]!;
      return dr * dr + dc * dc;
    }),
  );
}

/**
 * The matching of `B` samples' `L` input locations to their `L'` candidates by `distance(s, i,
 * j)`: each input location's nearest candidate (the lower index on ties), the `min(k, L)` with
 * the smallest distances kept (the lower input location on ties), in location order. Returns
 * the flat row indices `[B·M]` into the input's `[B·L]` and the candidate's `[B·L']` rows.
 */
function selectMatches(
  b: number,
  l: number,
  lc: number,
  k: number,
  distance: (s: number, i: number, j: number) => number,
): { m: number; inputRows: Int32Array; candidateRows: Int32Array } {
  const m = Math.min(k, l);
  const inputRows = new Int32Array(b * m);
  const candidateRows = new Int32Array(b * m);
  for (let s = 0; s < b; s++) {
    const nearest = Array.from({ length: l }, (_, i) => {
      let best = 0;
      let bestDistance = distance(s, i, 0);
      for (let j = 1; j < lc; j++) {
        const d = distance(s, i, j);
        if (d < bestDistance) [best, bestDistance] = [j, d];
      }
      return { i, best, dist: bestDistance };
    });
    const kept = [...nearest].sort((p, q) => p.dist - q.dist || p.i - q.i).slice(0, m);
    kept.sort((p, q) => p.i - q.i);
    kept.forEach((p, r) => {
      inputRows[s * m + r] = s * l + p.i;
      candidateRows[s * m + r] = s * lc + p.best;
    });
  }
  return { m, inputRows, candidateRows };
}

/** The matched rows of {@link selectMatches}: `[B, M, C]` of `input` and `[B, M, C]` of `candidate`, gathered with their gradient. */
function gatherMatches(
  input: tf.Tensor3D,
  candidate: tf.Tensor3D,
  { m, inputRows, candidateRows }: ReturnType<typeof selectMatches>,
): [tf.Tensor3D, tf.Tensor3D] {
  const [b, , c] = input.shape;
  const rows = (t: tf.Tensor3D, index: Int32Array) =>
    tf.reshape(tf.gather(tf.reshape(t, [b * t.shape[1], c]), tf.tensor1d(index, 'int32')), [b, m, c]) as tf.Tensor3D;
  return [rows(input, inputRows), rows(candidate, candidateRows)];
}

/**
 * The reference's `_vicreg_loss` of each matched pair `(x, y)` `[B, M_q, C]`, its three terms
 * weighted and summed: invariance MSE over this rank's rows; variance hinge and covariance of
 * each location m over the global batch, each halved between x and y. The statistics of every
 * location of every pair come from one {@link covarianceStatistics} (its `[C, C]` covariances
 * kept once, not on the autodiff tape).
 */
function matchedTerms(matches: Array<[tf.Tensor3D, tf.Tensor3D]>, o: typeof VICREGL_DEFAULTS, layout: BatchLayout): Scalar[] {
  const c = matches[0]![0].shape[2];
  const locations = tf.concat(matches.flatMap(([x, y]) => [tf.transpose(x, [1, 0, 2]), tf.transpose(y, [1, 0, 2])])) as tf.Tensor3D; // [Σ 2 M_q, B, C]
  const stats = covarianceStatistics(locations, layout); // [Σ 2 M_q, C + 1]
  let at = 0;
  return matches.map(([x, y]) => {
    const m = x.shape[1];
    const variances = tf.slice(stats, [at, 0], [2 * m, c]); // x's M, then y's
    const offDiagonal = tf.slice(stats, [at, c], [2 * m, 1]);
    at += 2 * m;
    const invariance = tf.mean(tf.squaredDifference(x, y));
    const variance = tf.mean(tf.relu(tf.sub(1, tf.sqrt(tf.add(variances, EPS))))); // ½ (x's mean + y's mean) = the mean over both
    const covariance = tf.div(tf.sum(offDiagonal), 2 * m * c); // ½ (mean_m of x's / C + mean_m of y's / C)
    return tf.addN([tf.mul(invariance, o.invWeight), tf.mul(variance, o.varWeight), tf.mul(covariance, o.covWeight)]) as Scalar;
  });
}

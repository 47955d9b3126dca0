import { l2NormalizeRows } from '../core/ops.js';
import { tf, type Tensor } from '../core/tf.js';

export interface KnnOptions {
  /** Neighbours that vote (solo-learn: 20). */
  k: number;
  /** Temperature of the vote weights exp(similarity / T) (solo-learn: 0.07). */
  temperature: number;
  numClasses: number;
  /** Test rows per similarity block, to bound memory at `chunk x N`. */
  chunk?: number;
}

/** Top-1 / top-5 accuracy in [0, 1]. */
export interface Accuracy {
  top1: number;
  top5: number;
}

/**
 * Weighted k-nearest-neighbour classification (Wu et al. 2018, as in solo-learn): cosine
 * similarity between L2-normalised features, the k most similar training samples vote
 * for their class with weight exp(sim / T), and the classes are ranked by total vote.
 *
 * `trainFeatures [N, F]`, `trainLabels [N]`, `testFeatures [M, F]`, `testLabels [M]`.
 */
export function weightedKnn(trainFeatures: Tensor, trainLabels: Int32Array, testFeatures: Tensor, testLabels: Int32Array, options: KnnOptions): Accuracy {
  const { temperature, numClasses } = options;
  const k = Math.min(options.k, trainFeatures.shape[0]);
  const chunk = options.chunk ?? 256;
  const m = testFeatures.shape[0];
  let top1 = 0;
  let top5 = 0;
  const trainNorm = tf.tidy(() => l2NormalizeRows(trainFeatures));
  const trainOneHot = tf.oneHot(tf.tensor1d(trainLabels, 'int32'), numClasses);
  try {
    for (let start = 0; start < m; start += chunk) {
      const size = Math.min(chunk, m - start);
      const ranking = tf.tidy(() => {
        const test = l2NormalizeRows(tf.slice(testFeatures, [start, 0], [size, -1]));
        const similarity = tf.matMul(test, trainNorm, false, true);
        const { values, indices } = tf.topk(similarity, k);
        const weights = tf.exp(tf.div(values, temperature));
        const neighbourClasses = tf.gather(trainOneHot, indices);
        const votes = tf.sum(tf.mul(neighbourClasses, tf.expandDims(weights, 2)), 1);
        return tf.topk(votes, Math.min(5, numClasses)).indices;
      });
      const predicted = ranking.dataSync();
      const width = ranking.shape[1] ?? 1;
      ranking.dispose();
      for (let i = 0; i < size; i++) {
        const label = testLabels[start + i];
        if (predicted[i * width] === label) top1++;
        for (let j = 0; j < width; j++) if (predicted[i * width + j] === label) top5++;
      }
    }
  } finally {
    trainNorm.dispose();
    trainOneHot.dispose();
  }
  return { top1: top1 / m, top5: top5 / m };
}

/** How neighbours are found and weighted in {@link knnSweep}. */
export type KnnDistance = 'cosine' | 'euclidean';

/** The distances {@link knnSweep} accepts. */
export const KNN_DISTANCES: readonly KnnDistance[] = ['cosine', 'euclidean'];

/** Options of {@link knnSweep}. */
export interface KnnSweepOptions {
  /** Neighbour counts to evaluate. */
  ks: readonly number[];
  /** Vote temperatures (cosine only; euclidean votes do not use one). */
  temperatures: readonly number[];
  distances: readonly KnnDistance[];
  numClasses: number;
  /** Test rows per distance block, to bound memory at `chunk x N`. */
  chunk?: number;
}

/** One setting of a sweep and its accuracy; `temperature` is undefined for euclidean. */
export interface KnnSweepResult extends Accuracy {
  distance: KnnDistance;
  k: number;
  temperature?: number;
}

/** Added to a euclidean distance before it is inverted into a vote weight (solo-learn's epsilon). */
const EUCLIDEAN_EPSILON = 1e-5;

/**
 * The `[size, kMax]` nearest neighbours (sorted, nearest first) of test rows `start ..
 * start + size` and their vote weights before the temperature: the cosine similarity of
 * L2-normalised features, or `1 / (euclidean distance + 1e-5)` of the raw features.
 */
function nearestNeighbours(train: Tensor, trainSquaredNorms: Tensor, testFeatures: Tensor, start: number, size: number, kMax: number, distance: KnnDistance) {
  const [values, indices] = tf.tidy(() => {
    const test = tf.slice(testFeatures, [start, 0], [size, -1]);
    if (distance === 'cosine') {
      const top = tf.topk(tf.matMul(l2NormalizeRows(test), train, false, true), kMax);
      return [top.values, top.indices];
    }
    // ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b, clamped at 0 against round-off.
    const squared = tf.relu(tf.sub(tf.add(tf.sum(tf.square(test), 1, true), trainSquaredNorms), tf.mul(2, tf.matMul(test, train, false, true))));
    const top = tf.topk(tf.neg(squared), kMax);
    return [tf.div(1, tf.add(tf.sqrt(tf.neg(top.values)), EUCLIDEAN_EPSILON)), top.indices];
  });
  const out = { values: values.dataSync() as Float32Array, indices: indices.dataSync() as Int32Array };
  tf.dispose([values, indices]);
  return out;
}

/**
 * Weighted kNN for every combination of `ks`, `temperatures` and `distances` in one pass
 * over the test set: the neighbours are found once per distance for the largest k, and
 * each setting votes with its first k of them. Cosine is {@link weightedKnn} (weights
 * exp(sim / T)); euclidean, as solo-learn's, finds the nearest raw features and weights
 * each vote by 1 / (distance + 1e-5). Classes are ranked by total vote, ties by index.
 *
 * `trainFeatures [N, F]`, `trainLabels [N]`, `testFeatures [M, F]`, `testLabels [M]`.
 * Results are in the order distance, k, temperature.
 */
export function knnSweep(
  trainFeatures: Tensor,
  trainLabels: Int32Array,
  testFeatures: Tensor,
  testLabels: Int32Array,
  options: KnnSweepOptions,
): KnnSweepResult[] {
  const { numClasses, distances } = options;
  const n = trainFeatures.shape[0];
  const m = testFeatures.shape[0];
  const chunk = options.chunk ?? 256;
  const ks = options.ks.map((k) => Math.min(k, n));
  const kMax = Math.max(...ks);
  const results: KnnSweepResult[] = [];
  const votes = new Float64Array(numClasses);
  const classes = Int32Array.from({ length: numClasses }, (_, i) => i);
  for (const distance of distances) {
    const settings = options.ks.flatMap((k, i): Array<{ k: number; used: number; temperature?: number }> =>
      distance === 'cosine' ? options.temperatures.map((temperature) => ({ k, used: ks[i], temperature })) : [{ k, used: ks[i], temperature: undefined }],
    );
    const hits = settings.map(() => ({ top1: 0, top5: 0 }));
    const train = tf.tidy(() => (distance === 'cosine' ? l2NormalizeRows(trainFeatures) : tf.clone(trainFeatures)));
    const trainSquaredNorms = tf.tidy(() => tf.reshape(tf.sum(tf.square(train), 1), [1, n]));
    try {
      for (let start = 0; start < m; start += chunk) {
        const size = Math.min(chunk, m - start);
        const { values, indices } = nearestNeighbours(train, trainSquaredNorms, testFeatures, start, size, kMax, distance);
        for (let i = 0; i < size; i++) {
          const label = testLabels[start + i];
          settings.forEach((s, si) => {
            votes.fill(0);
            for (let j = 0; j < s.used; j++) {
              const weight = values[i * kMax + j];
              votes[trainLabels[indices[i * kMax + j]]] += s.temperature === undefined ? weight : Math.exp(weight / s.temperature);
            }
            const ranked = Array.from(classes).sort((a, b) => votes[b] - votes[a] || a - b);
            if (ranked[0] === label) hits[si].top1++;
            if (ranked.slice(0, 5).includes(label)) hits[si].top5++;
          });
        }
      }
    } finally {
      tf.dispose([train, trainSquaredNorms]);
    }
    settings.forEach((s, si) => results.push({ distance, k: s.k, temperature: s.temperature, top1: hits[si].top1 / m, top5: hits[si].top5 / m }));
  }
  return results;
}

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

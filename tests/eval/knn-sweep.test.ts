import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf } from '../../src/core/tf.js';
import { knnSweep, weightedKnn } from '../../src/eval/knn.js';

describe('eval/knnSweep', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  const rng = new Rng(5);
  const classes = 6;
  const n = 300;
  const m = 90;
  const dim = 12;
  // Class centres plus noise, with varying norms (so cosine and euclidean neighbours differ).
  const make = (count: number) => {
    const labels = Int32Array.from({ length: count }, (_, i) => i % classes);
    const values = new Float32Array(count * dim);
    for (let i = 0; i < count; i++) {
      const scale = 0.5 + 2 * rng.uniform();
      for (let j = 0; j < dim; j++) values[i * dim + j] = scale * ((j % classes === labels[i] ? 1 : 0) + 0.8 * rng.normal());
    }
    return { features: tf.tensor2d(values, [count, dim]), labels };
  };
  const train = make(n);
  const test = make(m);

  it('every cosine setting of a sweep equals weightedKnn run alone with it', () => {
    const ks = [1, 5, 20, 50];
    const temperatures = [0.07, 0.5];
    const sweep = knnSweep(train.features, train.labels, test.features, test.labels, {
      ks,
      temperatures,
      distances: ['cosine'],
      numClasses: classes,
      chunk: 32,
    });
    assert.equal(sweep.length, ks.length * temperatures.length);
    for (const r of sweep) {
      const alone = weightedKnn(train.features, train.labels, test.features, test.labels, { k: r.k, temperature: r.temperature!, numClasses: classes });
      assert.deepEqual({ top1: r.top1, top5: r.top5 }, alone, `k=${r.k} T=${r.temperature}`);
    }
    assert.ok(new Set(sweep.map((r) => r.top1)).size > 1, 'the settings do not all agree');
  });

  it('euclidean differs from cosine on features of varying norm, and has no temperature', () => {
    const sweep = knnSweep(train.features, train.labels, test.features, test.labels, {
      ks: [1, 10],
      temperatures: [0.07, 0.1],
      distances: ['cosine', 'euclidean'],
      numClasses: classes,
    });
    const euclidean = sweep.filter((r) => r.distance === 'euclidean');
    assert.deepEqual(
      euclidean.map((r) => [r.k, r.temperature]),
      [
        [1, undefined],
        [10, undefined],
      ],
    );
    const cosine = sweep.filter((r) => r.distance === 'cosine' && r.temperature === 0.07);
    assert.notDeepEqual(
      euclidean.map((r) => r.top1),
      cosine.map((r) => r.top1),
    );
  });

  it('euclidean votes are 1 / (distance + 1e-5) of the nearest raw features (a hand computation)', () => {
    // Train points on a line: class 0 at x = 0 and 3, class 1 at x = 1.5 and 10.
    const trainPoints = tf.tensor2d([[0], [3], [1.5], [10]]);
    const trainLabels = Int32Array.from([0, 0, 1, 1]);
    // x = 1.4 (class 1): neighbours 1.5 (d 0.1, class 1), 0 (d 1.4, 0), 3 (d 1.6, 0).
    //   k = 3: class 1 has 1/0.1 = 10, class 0 1/1.4 + 1/1.6 = 1.34: right (a majority vote would be wrong).
    // x = 2.2 (class 1): neighbours 1.5 (d 0.7, 1), 3 (d 0.8, 0), 0 (d 2.2, 0).
    //   k = 2: 1/0.7 = 1.43 > 1/0.8 = 1.25: right; k = 3: class 0 gets 1.25 + 1/2.2 = 1.70 > 1.43: wrong
    //   (with 1/d^2 weights it would be right: 2.04 > 1.77).
    const testPoints = tf.tensor2d([[1.4], [2.2]]);
    const testLabels = Int32Array.from([1, 1]);
    const sweep = knnSweep(trainPoints, trainLabels, testPoints, testLabels, {
      ks: [1, 2, 3],
      temperatures: [0.1, 1],
      distances: ['euclidean'],
      numClasses: 2,
    });
    assert.deepEqual(
      sweep.map((r) => [r.k, r.top1, r.top5]),
      [
        [1, 1, 1],
        [2, 1, 1],
        [3, 0.5, 1],
      ],
    );
    tf.dispose([trainPoints, testPoints]);
  });

  after(() => tf.dispose([train.features, test.features]));
});

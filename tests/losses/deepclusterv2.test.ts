/**
 * Unit tests of DeepCluster v2's loss (its edge cases; its float64 PyTorch reference cases,
 * `deepclusterv2` and `deepclusterv2-lopsided`, are checked with every other loss by
 * tests/losses/cases.test.ts) and of the spherical k-means (closed forms on the circle, empty
 * clusters, input checks). The W-rank runs are in tests/distributed/deepclusterv2.full.test.ts and
 * tests/distributed/losses.full.test.ts.
 */
import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { deepClusterV2Loss, sphericalKMeans } from '../../src/losses/index.js';
import { useCpuEngine } from './helpers.js';

function close(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number, what: string): void {
  assert.equal(actual.length, expected.length, what);
  for (let i = 0; i < expected.length; i++) {
    assert.ok(Math.abs(actual[i]! - expected[i]!) <= tolerance * Math.max(1, Math.abs(expected[i]!)), `${what}[${i}]: ${actual[i]} vs ${expected[i]}`);
  }
}

/** Unit vectors at `degrees` on the circle, `[n, 2]`. */
function circle(...degrees: number[]): Float32Array {
  return Float32Array.from(degrees.flatMap((d) => [Math.cos((d * Math.PI) / 180), Math.sin((d * Math.PI) / 180)]));
}

describe('deepClusterV2Loss', () => {
  before(useCpuEngine);

  it('is 0 with gradient 0 when no sample has a cluster (epoch 0)', () => {
    const s = tf.randomNormal([6, 4]) as tf.Tensor2D;
    const { value, grads } = tf.valueAndGrads((x: tf.Tensor) =>
      deepClusterV2Loss([x as tf.Tensor2D], [tf.tensor1d([-1, -1, -1], 'int32')], { temperature: 0.1 }),
    )([s]);
    assert.equal(value.dataSync()[0], 0);
    assert.ok(grads[0]!.dataSync().every((g) => g === 0));
    tf.dispose([s, value, ...grads]);
  });

  it('refuses mismatched shapes, non-int32 targets and a non-positive temperature; NaN for out-of-range targets', () => {
    tf.tidy(() => {
      const s = tf.zeros([4, 3]) as tf.Tensor2D;
      const t = (...values: number[]) => tf.tensor1d(values, 'int32');
      assert.throws(() => deepClusterV2Loss([s], [t(0, 1, 2)], { temperature: 0.1 }), /head 0: scores \[4, 3\] must be \[V·B, K\]/);
      assert.throws(() => deepClusterV2Loss([s], [tf.tensor1d([0, 1])], { temperature: 0.1 }), /int32 targets \[B\].*got float32 \[2\]/);
      assert.throws(() => deepClusterV2Loss([s], [], { temperature: 0.1 }), /1 score matrices for 0 target arrays/);
      assert.throws(() => deepClusterV2Loss([s], [t(0, 1)], { temperature: 0 }), /temperature/);
      // Checked on the device (no read of the targets): the loss is NaN.
      for (const bad of [t(0, 3), t(-2, 1)]) assert.ok(Number.isNaN(deepClusterV2Loss([s], [bad], { temperature: 0.1 }).dataSync()[0]), `${bad.dataSync()}`);
      assert.ok(Number.isFinite(deepClusterV2Loss([s], [t(-1, 2)], { temperature: 0.1 }).dataSync()[0]));
    });
  });
});

describe('sphericalKMeans', () => {
  before(useCpuEngine);

  it('moves each centroid to the normalised mean of its rows (closed form on the circle)', () => {
    // Rows at 0°, 10° and 90°, 100°; centroids start on rows 0 and 2.
    const rows = circle(0, 10, 90, 100);
    const { assignments, centroids } = sphericalKMeans(rows, 2, circle(0, 90), 1);
    assert.deepEqual([...assignments], [0, 0, 1, 1]);
    close(centroids, circle(5, 95), 1e-6, 'centroids');
  });

  it('leaves a centroid that gets no row where it was, and keeps the first centroid on ties', () => {
    const rows = circle(0, 10, 90, 100);
    const { assignments, centroids } = sphericalKMeans(rows, 2, circle(0, 90, 225), 3);
    assert.deepEqual([...assignments], [0, 0, 1, 1]);
    close(centroids.subarray(4), circle(225), 0, 'empty cluster');
    const tie = sphericalKMeans(Float32Array.from([Math.SQRT1_2, Math.SQRT1_2]), 2, circle(0, 90), 0);
    assert.deepEqual([...tie.assignments], [0]);
  });

  it('with 0 iterations assigns to the initial centroids and returns them', () => {
    const init = circle(30, 200);
    const { assignments, centroids } = sphericalKMeans(circle(20, 40, 190, 359), 2, init, 0);
    assert.deepEqual([...assignments], [0, 0, 1, 0]);
    assert.deepEqual([...centroids], [...init]);
  });

  it('refuses rows that do not fit D, no centroid and a negative iteration count', () => {
    assert.throws(() => sphericalKMeans(new Float32Array(5), 2, circle(0), 1), /dim/);
    assert.throws(() => sphericalKMeans(circle(0), 2, new Float32Array(0), 1), /initial/);
    assert.throws(() => sphericalKMeans(circle(0), 2, circle(0), -1), /iterations/);
  });
});

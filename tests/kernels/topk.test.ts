import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { assertClose, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

describe('kernels/topk: TopK (a heap per row)', () => {
  before(requireNativeKernels);

  it('the k largest of each row, sorted, equal the JS kernel exactly: k = 1, a few, all; rank 1 to 3; ties; int32', () => {
    const what = 'topk of random rows, rows with ties and int32 rows';
    const r = bothEngines(() => {
      const x = randn([4, 3, 50], 1);
      // Rounded to a coarse grid: many equal values in a row, +0 and -0 among them.
      const ties = tf.tensor2d(
        Array.from({ length: 3 * 40 }, (_, i) => (i % 7 === 0 ? (i % 2 ? -0 : 0) : Math.round(Math.sin(i * 1.7) * 3) / 2)),
        [3, 40],
      );
      const ints = tf.tensor2d(
        Int32Array.from({ length: 2 * 30 }, (_, i) => ((i * 37) % 11) - 5),
        [2, 30],
        'int32',
      );
      const out = [];
      for (const k of [1, 5, 50]) {
        const { values, indices } = tf.topk(x, k);
        out.push(values, tf.cast(indices, 'float32'));
      }
      for (const k of [1, 9, 40]) {
        const { values, indices } = tf.topk(ties, k);
        out.push(values, tf.cast(indices, 'float32'));
      }
      const vector = tf.topk(tf.tensor1d([3, 1, 3, 2, 3]), 2);
      const integer = tf.topk(ints, 7);
      out.push(vector.values, tf.cast(vector.indices, 'float32'), tf.cast(integer.values, 'float32'), tf.cast(integer.indices, 'float32'));
      return out;
    });
    assertClose(r, what, 0);
    // The lower index first among equal values: [3, 1, 3, 2, 3] -> 3 at 0 and 2.
    assert.deepEqual(Array.from(r.native.values[13]!), [0, 2]);
    assertRanNatively(r.stats, 'TopK', what);
  });

  it('a row with NaN and an unsorted topk go to the JS kernel', () => {
    const r = bothEngines(() => {
      const { values, indices } = tf.topk(tf.tensor2d([1, NaN, 3, 2], [1, 4]), 2);
      return [values, tf.cast(indices, 'float32')];
    });
    assert.equal(r.stats['TopK']?.fallback, 1);
    const unsorted = bothEngines(() => [tf.topk(tf.tensor1d([1, 4, 2, 3]), 2, false).values]);
    assert.equal(unsorted.stats['TopK']?.fallback, 1);
  });
});

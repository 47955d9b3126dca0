import assert from 'node:assert/strict';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { assertClose, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

/** `n` seeded indices in [0, size), with repeats. */
function someIndices(n: number, size: number, seed: number): Int32Array {
  const rng = new Rng(seed);
  return Int32Array.from({ length: n }, () => Math.floor(rng.uniform() * size));
}

describe('kernels/gather: GatherV2 and UnsortedSegmentSum (row copies)', () => {
  before(requireNativeKernels);

  it('GatherV2 on every axis, with repeated indices and a 2-D index tensor, equals the JS kernel exactly', () => {
    const shape = [5, 7, 3, 4];
    shape.forEach((size, axis) => {
      const what = `gather axis ${axis} of [${shape}]`;
      const flat = someIndices(6, size, 10 + axis);
      const r = bothEngines(() => {
        const x = randn(shape, axis);
        return [tf.gather(x, tf.tensor1d(flat, 'int32'), axis), tf.gather(x, tf.tensor2d(flat, [2, 3], 'int32'), axis)];
      });
      assertClose(r, what, 0);
      assert.deepEqual(r.native.shapes[1], [...shape.slice(0, axis), 2, 3, ...shape.slice(axis + 1)]);
      assertRanNatively(r.stats, 'GatherV2', what);
    });
  });

  it('GatherV2 of int32 values (labels of a queue) equals the JS kernel', () => {
    const labels = Int32Array.from({ length: 50 }, (_, i) => (i * 7) % 10);
    const idx = someIndices(20, 50, 3);
    const r = bothEngines(() => tf.cast(tf.gather(tf.tensor1d(labels, 'int32'), tf.tensor1d(idx, 'int32')), 'float32'));
    assertClose(r, 'int32 gather', 0);
    assertRanNatively(r.stats, 'GatherV2', 'int32 gather');
  });

  it('GatherV2 throws on an index out of range, as the JS kernel does', () => {
    const x = tf.zeros([4, 2]);
    assert.throws(() => tf.gather(x, tf.tensor1d([0, 4], 'int32')), /GatherV2: the index value 4 is not in \[0, 3\]/);
    assert.throws(() => tf.gather(x, tf.tensor1d([-1], 'int32')), /GatherV2: the index value -1 is not in \[0, 3\]/);
    x.dispose();
  });

  it("a gather's gradient (UnsortedSegmentSum) with repeated and unused rows equals the JS kernel's", () => {
    const what = 'd/dx sum(gather(x, idx) * w)';
    const idx = someIndices(40, 30, 7); // repeats, and some of the 30 rows never gathered
    const r = bothEngines(() => {
      const x = randn([30, 6], 1);
      const w = randn([40, 6], 2);
      return tf.grad((v: Tensor) => tf.sum(tf.mul(tf.gather(v, tf.tensor1d(idx, 'int32')), w)))(x);
    });
    assertClose(r, what, 1e-6);
    assertRanNatively(r.stats, 'UnsortedSegmentSum', what);
    const unused = [...Array(30).keys()].filter((row) => !idx.includes(row));
    assert.ok(unused.length > 0, 'the case has rows that are never gathered');
    for (const row of unused)
      assert.ok(
        r.native.values[0].subarray(row * 6, row * 6 + 6).every((v) => v === 0),
        `row ${row} has a zero gradient`,
      );
  });

  it("a permutation's gradient (MAE's patch gathers) is exact", () => {
    const n = 200;
    const perm = new Rng(5).permutation(n);
    const r = bothEngines(() => tf.grad((v: Tensor) => tf.sum(tf.mul(tf.gather(v, tf.tensor1d(perm, 'int32')), randn([n, 16], 9))))(randn([n, 16], 8)));
    assertClose(r, 'permutation gradient', 0);
    assertRanNatively(r.stats, 'UnsortedSegmentSum', 'permutation gradient');
  });

  it('UnsortedSegmentSum drops ids outside [0, numSegments), as the JS kernel does', () => {
    const ids = Int32Array.from([2, -1, 0, 5, 2, 1]);
    const r = bothEngines(() => tf.unsortedSegmentSum(randn([6, 3], 4), tf.tensor1d(ids, 'int32'), 4));
    assertClose(r, 'ids out of range', 0);
    assertRanNatively(r.stats, 'UnsortedSegmentSum', 'ids out of range');
    assert.ok(
      r.native.values[0].subarray(9, 12).every((v) => v === 0),
      'segment 3 is hit by no id',
    );
  });
});

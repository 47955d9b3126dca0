import assert from 'node:assert/strict';
import { tf, type Tensor } from '../../src/core/tf.js';
import { assertClose, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

describe('kernels/slice: Slice, SplitV, Unpack and PadV2 (block copies)', () => {
  before(requireNativeKernels);

  it('Slice of a block along every axis and of a box inside all axes equals the JS kernel exactly', () => {
    const shape = [4, 5, 3, 6];
    const cases: Array<[number[], number[]]> = [
      [
        [0, 1, 0, 0],
        [4, 3, 3, 6],
      ], // a middle axis (the [CLS] token's kind)
      [
        [0, 0, 0, 2],
        [4, 5, 3, 3],
      ], // innermost: runs of 3
      [
        [0, 0, 1, 0],
        [4, 5, 1, 6],
      ],
      [
        [1, 2, 1, 1],
        [2, 2, 2, 4],
      ], // a box
      [
        [0, 4, 0, 0],
        [4, -1, 3, 6],
      ], // size -1: to the end
    ];
    for (const [begin, size] of cases) {
      const what = `slice [${begin}] [${size}] of [${shape}]`;
      const r = bothEngines(() => [tf.slice(randn(shape, 1), begin, size)]);
      assertClose(r, what, 0);
      assertRanNatively(r.stats, 'Slice', what);
    }
  });

  it('Slice of int32 values equals the JS kernel', () => {
    const values = Int32Array.from({ length: 60 }, (_, i) => i * 3 - 7);
    const r = bothEngines(() => [tf.cast(tf.slice(tf.tensor3d(values, [3, 4, 5], 'int32'), [0, 1, 2], [3, 2, 3]), 'float32')]);
    assertClose(r, 'int32 slice', 0);
    assertRanNatively(r.stats, 'Slice', 'int32 slice');
  });

  it('SplitV along a middle and the last axis, in sizes and in equal parts, equals the JS kernel exactly', () => {
    const what = 'split [3, 7, 4] along axes 1 and 2';
    const r = bothEngines(() => {
      const x = randn([3, 7, 4], 2);
      return [...tf.split(x, [1, 4, 2], 1), ...tf.split(x, 2, 2)];
    });
    assertClose(r, what, 0);
    assert.deepEqual(r.native.shapes, [
      [3, 1, 4],
      [3, 4, 4],
      [3, 2, 4],
      [3, 7, 2],
      [3, 7, 2],
    ]);
    assertRanNatively(r.stats, 'SplitV', what);
  });

  it('Unpack along a middle, the last and a negative axis, of int32 values, and its gradient, equals the JS kernel exactly', () => {
    const what = 'unstack [3, 5, 4] along axes 1, 2 and -2';
    const r = bothEngines(() => {
      const x = randn([3, 5, 4], 6);
      const ints = tf.tensor3d(
        Int32Array.from({ length: 24 }, (_, i) => i * 5 - 11),
        [2, 3, 4],
        'int32',
      );
      const w = randn([3, 4], 7);
      const grad = tf.grad((v: Tensor) => tf.addN(tf.unstack(v, 1).map((piece, i) => tf.sum(tf.mul(piece, tf.mul(w, i + 1))))))(x);
      return [...tf.unstack(x, 1), ...tf.unstack(x, 2), ...tf.unstack(x, -2), ...tf.unstack(ints, 2).map((p) => tf.cast(p, 'float32')), grad];
    });
    assertClose(r, what, 0);
    assert.deepEqual(r.native.shapes.slice(0, 6), [...Array(5).fill([3, 4]), [3, 5]]);
    assertRanNatively(r.stats, 'Unpack', what);
  });

  it('PadV2 with zeros and with a constant, and the gradients of a slice and of a concat, equal the JS kernels', () => {
    const what = 'pad and the gradients of slice and concat along axis 1';
    const r = bothEngines(() => {
      const x = randn([3, 5, 4], 3);
      const w = randn([3, 3, 4], 4);
      const sliceGrad = tf.grad((v: Tensor) => tf.sum(tf.mul(tf.slice(v, [0, 1, 0], [3, 3, 4]), w)))(x);
      const concatGrad = tf.grad((v: Tensor) => tf.sum(tf.mul(tf.concat([v, w], 1), randn([3, 8, 4], 5))))(x);
      return [
        tf.pad(x, [
          [1, 0],
          [0, 2],
          [1, 1],
        ]),
        tf.pad(
          x,
          [
            [0, 1],
            [2, 0],
            [0, 0],
          ],
          1.5,
        ),
        sliceGrad,
        concatGrad,
      ];
    });
    assertClose(r, what, 0);
    assertRanNatively(r.stats, 'PadV2', what);
    assertRanNatively(r.stats, 'SplitV', what);
  });
});

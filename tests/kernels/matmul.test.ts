import assert from 'node:assert/strict';
import { tf, type Tensor } from '../../src/core/tf.js';
import { assertClose, assertRanNatively, bothEngines, Pick, randn, requireNativeKernels } from './helpers.js';

type Activation = 'linear' | 'relu' | 'relu6' | 'leakyrelu' | 'elu' | 'sigmoid';

describe('kernels/native matmul', () => {
  before(requireNativeKernels);

  /** Operands stored so that op(a) is [..., m, k] and op(b) is [..., k, n]. */
  function operands(seed: number, m: number, n: number, k: number, ta: boolean, tb: boolean, outerA: number[], outerB: number[]): [Tensor, Tensor] {
    const a = randn([...outerA, ...(ta ? [k, m] : [m, k])], seed);
    const b = randn([...outerB, ...(tb ? [n, k] : [k, n])], seed + 1);
    return [a, b];
  }

  it('BatchMatMul matches the JS kernel: random sizes, all transposes, batches and broadcast batches', () => {
    const pick = new Pick(11);
    const batches: Array<[number[], number[]]> = [
      [[], []],
      [[3], [3]],
      [[1], [4]],
      [[5], [1]],
      [
        [2, 3],
        [2, 3],
      ],
      [[4], []],
    ];
    let i = 0;
    for (const [outerA, outerB] of batches) {
      for (const ta of [false, true]) {
        for (const tb of [false, true]) {
          const m = pick.int(1, 40);
          const n = pick.int(1, 40);
          const k = pick.int(1, 70);
          const what = `matMul m=${m} n=${n} k=${k} ta=${ta} tb=${tb} outer=[${outerA}]x[${outerB}]`;
          const r = bothEngines(() => {
            const [a, b] = operands(100 + i, m, n, k, ta, tb, outerA, outerB);
            return tf.matMul(a, b, ta, tb);
          });
          assertClose(r, what);
          assertRanNatively(r.stats, 'BatchMatMul', what);
          i++;
        }
      }
    }
  });

  it('BatchMatMul handles 1024 x 1024', () => {
    const r = bothEngines(() => tf.matMul(randn([256, 1024], 1), randn([1024, 64], 2)));
    assertClose(r, 'matMul 256x1024x64');
  });

  it('_FusedMatMul with bias and activations matches the JS kernel', () => {
    const pick = new Pick(12);
    const activations: Activation[] = ['linear', 'relu', 'relu6', 'leakyrelu', 'elu', 'sigmoid'];
    let i = 0;
    for (const activation of activations) {
      for (const biasShape of ['none', 'n', '1n'] as const) {
        const ta = pick.one([false, true]);
        const tb = pick.one([false, true]);
        const m = pick.int(2, 30);
        const n = pick.int(2, 30);
        const k = pick.int(2, 30);
        const what = `fused.matMul ${activation} bias=${biasShape} m=${m} n=${n} k=${k} ta=${ta} tb=${tb}`;
        const r = bothEngines(() => {
          const [a, b] = operands(200 + i, m, n, k, ta, tb, [], []);
          const bias = biasShape === 'none' ? undefined : randn(biasShape === 'n' ? [n] : [1, n], 300 + i);
          return tf.fused.matMul({ a, b, transposeA: ta, transposeB: tb, bias, activation, leakyreluAlpha: 0.1 });
        });
        assertClose(r, what);
        assertRanNatively(r.stats, '_FusedMatMul', what);
        i++;
      }
    }
  });

  it('_FusedMatMul falls back to JS for prelu and for a full-matrix bias', () => {
    const r = bothEngines(() => {
      const a = randn([6, 5], 1);
      const b = randn([5, 4], 2);
      return [
        tf.fused.matMul({ a, b, activation: 'prelu', preluActivationWeights: randn([4], 3) }),
        tf.fused.matMul({ a, b, bias: randn([6, 4], 4), activation: 'relu' }),
      ];
    });
    assertClose(r, 'fallbacks');
    assert.equal(r.stats._FusedMatMul?.native ?? 0, 0);
    assert.equal(r.stats._FusedMatMul?.fallback, 2);
  });

  it('matmul gradients (all transposes, batched) match the JS kernels', () => {
    let i = 0;
    for (const ta of [false, true]) {
      for (const tb of [false, true]) {
        for (const outer of [[], [3]]) {
          const what = `grads of matMul ta=${ta} tb=${tb} outer=[${outer}]`;
          const r = bothEngines(() => {
            const [a, b] = operands(400 + i, 7, 9, 11, ta, tb, outer, outer);
            const w = randn([...outer, 7, 9], 500 + i);
            return tf.grads((x: Tensor, y: Tensor) => tf.sum(tf.mul(tf.matMul(x, y, ta, tb), w)))([a, b]);
          });
          assertClose(r, what);
          assertRanNatively(r.stats, 'BatchMatMul', what);
          i++;
        }
      }
    }
  });

  it('fused matmul + bias + relu gradients match the JS kernels', () => {
    const r = bothEngines(() => {
      const a = randn([12, 10], 1);
      const b = randn([10, 8], 2);
      const bias = randn([8], 3);
      const w = randn([12, 8], 4);
      // Under a gradient tape tfjs fuses only linear activations; the forward value here
      // (outside the tape) runs the fused kernel.
      const y = tf.fused.matMul({ a, b, bias, activation: 'relu' });
      return [
        y,
        ...tf.grads((x: Tensor, z: Tensor, c: Tensor) => tf.sum(tf.mul(tf.fused.matMul({ a: x, b: z, bias: c, activation: 'relu' }), w)))([a, b, bias]),
      ];
    });
    assertClose(r, 'grads of fused matMul');
    assertRanNatively(r.stats, '_FusedMatMul', 'grads of fused matMul');
  });
});

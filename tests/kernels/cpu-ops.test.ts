import assert from 'node:assert/strict';
import { gelu } from '../../src/core/layers.js';
import { tf, type Tensor, type Tensor4D } from '../../src/core/tf.js';
import { softmaxLastAxis } from '../../src/core/transformer.js';
import { assertClose, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

/** A tensor with NaN, ±Infinity, ±0 and ties sprinkled in, to check the JS semantics. */
function special(shape: number[], seed: number): Tensor {
  const t = randn(shape, seed);
  const v = Float32Array.from(t.dataSync());
  t.dispose();
  const specials = [NaN, Infinity, -Infinity, 0, -0, 1, 1];
  for (let i = 0; i < v.length; i += 7) v[i] = specials[(i / 7) % specials.length];
  return tf.tensor(v, shape);
}

describe('kernels/native element-wise, reductions, batch norm, pooling', () => {
  before(requireNativeKernels);

  const binaryOps: Array<[string, (a: Tensor, b: Tensor) => Tensor]> = [
    ['Add', tf.add],
    ['Sub', tf.sub],
    ['Multiply', tf.mul],
    ['RealDiv', tf.div],
    ['SquaredDifference', tf.squaredDifference],
    ['Maximum', tf.maximum],
    ['Minimum', tf.minimum],
  ];
  const shapePairs: Array<[number[], number[]]> = [
    [
      [4, 6, 5, 8],
      [4, 6, 5, 8],
    ], // same shape
    [[4, 6, 5, 8], [8]], // per-channel (batch norm)
    [[8], [4, 6, 5, 8]], // broadcast on the left
    [
      [4, 1, 1, 8],
      [4, 6, 5, 8],
    ], // the gradient of a spatial mean
    [[], [3, 7]], // scalar
    [[3, 7], []],
    [
      [3, 1],
      [1, 4],
    ], // both broadcast
    [
      [2, 3, 1, 5],
      [3, 4, 1],
    ], // ranks differ, interleaved
    [[1, 200000], [1]], // one long row
  ];

  for (const [name, op] of binaryOps) {
    it(`${name} with broadcasting matches the JS kernel (incl. NaN/Inf semantics)`, () => {
      shapePairs.forEach(([sa, sb], i) => {
        const what = `${name} [${sa}] with [${sb}]`;
        const r = bothEngines(() => [op(randn(sa, 10 + i), randn(sb, 20 + i)), op(special(sa, 30 + i), special(sb, 40 + i))]);
        // Add, Sub, Multiply, Maximum and Minimum are exact; the JS kernels square and divide in float64.
        assertClose(r, what, name === 'RealDiv' || name === 'SquaredDifference' ? 1e-6 : 0);
        assertRanNatively(r.stats, name, what);
      });
    });
  }

  const unaryOps: Array<[string, (x: Tensor) => Tensor]> = [
    ['Relu', tf.relu],
    ['Relu6', tf.relu6],
    ['Step', (x) => tf.step(x, 0.25)],
    ['Square', tf.square],
    ['Neg', tf.neg],
    ['Sqrt', tf.sqrt],
    ['Rsqrt', tf.rsqrt],
    ['Exp', tf.exp],
    ['Log', tf.log],
    ['Abs', tf.abs],
    ['Sigmoid', tf.sigmoid],
    ['Tanh', tf.tanh],
    ['Reciprocal', tf.reciprocal],
    ['Erf', tf.erf],
  ];
  it('unary ops match the JS kernels (incl. NaN/Inf semantics)', () => {
    for (const [name, op] of unaryOps) {
      const r = bothEngines(() => [op(randn([3, 50, 41], 1, 3)), op(special([1000], 2))]);
      assertClose(r, name, 1e-6);
      assertRanNatively(r.stats, name, name);
    }
  });

  it('Sum, Mean, Max and Min over any axes match the JS kernels', () => {
    const axesList: Array<number | number[] | null> = [[0, 1, 2], [1, 2], 0, 3, -1, [0, 2], [1, 3], [0, 3], null, [2]];
    const ops: Array<[string, (x: Tensor, axis: number | number[] | null, keepDims: boolean) => Tensor]> = [
      ['Sum', (x, a, k) => tf.sum(x, a ?? undefined, k)],
      ['Mean', (x, a, k) => tf.mean(x, a ?? undefined, k)],
      ['Max', (x, a, k) => tf.max(x, a ?? undefined, k)],
      ['Min', (x, a, k) => tf.min(x, a ?? undefined, k)],
    ];
    for (const [name, op] of ops) {
      axesList.forEach((axes, i) => {
        for (const keepDims of [false, true]) {
          const what = `${name} axes=${JSON.stringify(axes)} keepDims=${keepDims}`;
          const r = bothEngines(() => [op(randn([6, 5, 1, 7], 50 + i, 2, 1), axes, keepDims), op(randn([64, 30, 20, 9], 60 + i), axes, keepDims)]);
          assertClose(r, what, 1e-5);
          assertRanNatively(r.stats, name, what);
        }
      });
    }
    // NaN propagation of Max / Min.
    const r = bothEngines(() => [tf.max(special([10, 20], 3), 0), tf.min(special([10, 20], 3), 1), tf.sum(special([10, 20], 3), 0)]);
    assertClose(r, 'NaN semantics of reductions', 1e-6);
  });

  it('Sum accumulates in double like the JS kernel (cancelling sums stay exact)', () => {
    // Synchronised batch norm all-reduces sums such as sum(dy) that nearly cancel; summed in
    // float blocks they carried errors that broke the 2-rank vs 1-process agreement of a
    // tiny ResNet. Here every channel sums to exactly 0: half the rows, then their negations.
    const rows = 1 << 15;
    for (const c of [1, 8]) {
      const half = randn([rows / 2, c], 11 + c, 3).dataSync();
      const v = new Float32Array(rows * c);
      v.set(half);
      for (let r = 0; r < rows / 2; r++) for (let k = 0; k < c; k++) v[(rows - 1 - r) * c + k] = -half[r * c + k];
      const x = tf.tensor(v, [rows / 64, 8, 8, c]);
      const got = tf.tidy(() => tf.sum(x, [0, 1, 2]).dataSync());
      x.dispose();
      // In double the partial sums of float32 values are exact here; float blocks are off by ~1e-4.
      got.forEach((g, k) => assert.ok(Math.abs(g) < 1e-9, `channel ${k} of ${c}: ${g} instead of 0`));
    }
  });

  it('Tile and Transpose match the JS kernels', () => {
    const r = bothEngines(() => [
      tf.tile(randn([1, 1, 1, 16], 1), [4, 5, 6, 1]),
      tf.tile(randn([2, 3, 4], 2), [3, 1, 2]),
      tf.tile(randn([5], 3), [7]),
      tf.transpose(randn([4, 5, 6, 7], 4), [3, 0, 1, 2]),
      tf.transpose(randn([4, 5, 6, 7], 5), [0, 2, 1, 3]),
      tf.transpose(randn([30, 40], 6)),
    ]);
    assertClose(r, 'tile/transpose', 0);
    assertRanNatively(r.stats, 'Tile', 'tile');
    assertRanNatively(r.stats, 'Transpose', 'transpose');
  });

  it('FusedBatchNorm (tf.batchNorm) matches the JS kernel', () => {
    const r = bothEngines(() => {
      const x = randn([8, 6, 5, 16], 1, 2, 3);
      const mean = randn([16], 2);
      const variance = tf.abs(randn([16], 3));
      return [
        tf.batchNorm(x, mean, variance, randn([16], 4), randn([16], 5), 1e-3),
        tf.batchNorm(x, mean, variance, undefined, undefined, 1e-5),
        tf.batchNorm(randn([40, 16], 6), mean, variance, tf.fill([16], 0.5), randn([16], 7)),
      ];
    });
    assertClose(r, 'batchNorm', 1e-5);
    assertRanNatively(r.stats, 'FusedBatchNorm', 'batchNorm');
  });

  it('MaxPool, AvgPool and their gradients match the JS kernels (incl. ties)', () => {
    const configs: Array<[number | [number, number], number | [number, number], 'same' | 'valid' | number]> = [
      [2, 2, 'valid'],
      [3, 2, 'same'],
      [3, 1, 'same'],
      [3, 2, 1],
      [[2, 3], [1, 2], 'valid'],
      [3, 3, 'same'],
    ];
    configs.forEach(([filter, stride, pad], i) => {
      const what = `pool filter=${filter} stride=${stride} pad=${pad}`;
      const r = bothEngines(() => {
        const x = randn([3, 11, 9, 6], 70 + i);
        // Ties: ReLU zeros and repeated integers, where the first maximum must win.
        const ties = tf.round(tf.relu(tf.mul(randn([3, 11, 9, 6], 80 + i), 2)));
        const out: Tensor[] = [];
        for (const input of [x, ties]) {
          const maxF = (a: Tensor) => tf.maxPool(a as Tensor4D, filter, stride, pad);
          const avgF = (a: Tensor) => tf.avgPool(a as Tensor4D, filter, stride, pad);
          const wMax = randn(maxF(input).shape, 90 + i);
          const wAvg = randn(avgF(input).shape, 95 + i);
          out.push(maxF(input), avgF(input));
          out.push(tf.grad((a: Tensor) => tf.sum(tf.mul(maxF(a), wMax)))(input));
          out.push(tf.grad((a: Tensor) => tf.sum(tf.mul(avgF(a), wAvg)))(input));
        }
        return out;
      });
      assertClose(r, what, 1e-6);
      for (const kernel of ['MaxPool', 'AvgPool', 'MaxPoolGrad', 'AvgPoolGrad']) assertRanNatively(r.stats, kernel, what);
    });
  });

  it('the ReLU gradient runs as one native kernel and matches tfjs', () => {
    const r = bothEngines(() => {
      const x = special([4, 7, 9, 8], 1);
      const w = special([4, 7, 9, 8], 2);
      return tf.grad((a: Tensor) => tf.sum(tf.mul(tf.relu(a), w)))(x);
    });
    assertClose(r, 'relu gradient', 0);
    assertRanNatively(r.stats, 'SslZooReluGrad', 'relu gradient');
  });

  it('GELU runs as one native kernel each way and matches the composed tfjs form (values and gradient)', () => {
    const r = bothEngines(() => {
      const x = randn([4, 65, 96], 3, 3);
      const w = randn([4, 65, 96], 4);
      return [gelu(x), tf.grad((a: Tensor) => tf.sum(tf.mul(gelu(a), w)))(x)];
    });
    assertClose(r, 'gelu', 1e-6);
    assertRanNatively(r.stats, 'SslZooGelu', 'gelu');
    assertRanNatively(r.stats, 'SslZooGeluGrad', 'gelu gradient');
  });

  it('softmax over the last axis runs as one native kernel each way and matches the composed tfjs form', () => {
    const r = bothEngines(() => {
      const x = randn([4, 3, 17, 65], 5, 4);
      const w = randn([4, 3, 17, 65], 6);
      return [softmaxLastAxis(x), tf.grad((a: Tensor) => tf.sum(tf.mul(softmaxLastAxis(a), w)))(x)];
    });
    assertClose(r, 'softmax', 1e-6);
    assertRanNatively(r.stats, 'SslZooSoftmax', 'softmax');
    assertRanNatively(r.stats, 'SslZooSoftmaxGrad', 'softmax gradient');
    // Negative control: the normalisation is per row of the last axis, not of another axis.
    const other = tf.tidy(() => tf.transpose(softmaxLastAxis(tf.transpose(randn([4, 3, 17, 65], 5, 4), [0, 1, 3, 2])), [0, 1, 3, 2]));
    assert.ok(tf.max(tf.abs(tf.sub(other, tf.tensor(r.native.values[0], [4, 3, 17, 65])))).dataSync()[0] > 0.1, 'softmax: axis control');
  });

  it('leaves non-float32 tensors to the JS kernels', () => {
    const r = bothEngines(() => [
      tf.cast(tf.add(tf.tensor([1, 2, 3], [3], 'int32'), tf.tensor([4, 5, 6], [3], 'int32')), 'float32'),
      tf.cast(
        tf.sum(
          tf.tensor(
            [
              [1, 2],
              [3, 4],
            ],
            [2, 2],
            'int32',
          ),
          0,
        ),
        'float32',
      ),
      tf.cast(tf.neg(tf.tensor([1, -2], [2], 'int32')), 'float32'),
    ]);
    assertClose(r, 'int32', 0);
    assert.equal(r.stats.Add?.native ?? 0, 0);
    assert.equal(r.stats.Sum?.native ?? 0, 0);
  });
});

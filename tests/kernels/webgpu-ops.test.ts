import { batchNormTraining } from '../../src/core/kernels/batch-norm.js';
import { gelu } from '../../src/core/kernels/gelu.js';
import { groupNorm } from '../../src/core/kernels/group-norm.js';
import { tf, type Tensor4D } from '../../src/core/tf.js';
import { useCpu } from '../helpers/webgpu.js';
import { assertMatches, onBothEngines, randn, valueAndGrads, type Computation, type ReadBack } from './webgpu-helpers.js';

/**
 * Op by op, webgpu (tfjs's WebGPU kernels and ssl-zoo's WGSL ones) against cpu-js, for
 * what the backbones (mlp, tiny_resnet, resnet18's CIFAR stem, vit_tiny) and the losses
 * run: each op's output and its gradients with respect to every input. Shapes are small
 * (SwiftShader is slow) and deliberately not multiples of workgroup or tile sizes.
 */

type Conv = { x: number[]; filter: number[]; stride: number; pad: 'same' | 'valid' | number };

const CONVS: Record<string, Conv> = {
  '3x3 stride 1 same': { x: [2, 9, 9, 3], filter: [3, 3, 3, 5], stride: 1, pad: 'same' },
  '3x3 stride 2 padding 1': { x: [2, 9, 9, 4], filter: [3, 3, 4, 6], stride: 2, pad: 1 },
  '3x3 stride 1 valid': { x: [3, 7, 6, 2], filter: [3, 3, 2, 5], stride: 1, pad: 'valid' },
  '1x1 stride 2 valid (downsample)': { x: [2, 8, 8, 6], filter: [1, 1, 6, 10], stride: 2, pad: 'valid' },
  '1x1 stride 1 (CIFAR stem width)': { x: [2, 5, 5, 3], filter: [1, 1, 3, 64], stride: 1, pad: 'same' },
};

type MatMul = { a: number[]; b: number[]; transposeA: boolean; transposeB: boolean };

const MATMULS: Record<string, MatMul> = {
  'a b': { a: [5, 7], b: [7, 3], transposeA: false, transposeB: false },
  'a^T b': { a: [7, 5], b: [7, 3], transposeA: true, transposeB: false },
  'a b^T': { a: [5, 7], b: [3, 7], transposeA: false, transposeB: true },
  'a^T b^T': { a: [7, 5], b: [3, 7], transposeA: true, transposeB: true },
  'batched a b^T (attention scores)': { a: [2, 3, 6, 8], b: [2, 3, 6, 8], transposeA: false, transposeB: true },
  'projector [16, 128] -> [16, 2048]': { a: [16, 128], b: [128, 2048], transposeA: false, transposeB: false },
  'a b^T, K = 2048 (split-K program)': { a: [16, 2048], b: [128, 2048], transposeA: false, transposeB: true },
  'a^T b^T, K = 2052 (split-K program)': { a: [2052, 12], b: [36, 2052], transposeA: true, transposeB: true },
};

const REDUCTIONS: Array<[string, 'sum' | 'mean' | 'max', number[] | undefined]> = [
  ['sum', 'sum', [0, 1, 2]],
  ['sum', 'sum', [1, 2]],
  ['sum', 'sum', [3]],
  ['sum', 'sum', undefined],
  ['mean', 'mean', [0, 1, 2]],
  ['mean', 'mean', [1, 2]],
  ['mean', 'mean', [0]],
  ['max', 'max', [3]],
  ['max', 'max', [1, 2]],
  ['max', 'max', [0, 1, 2]],
];

function computations(): Record<string, Computation> {
  const c: Record<string, Computation> = {};
  let seed = 1;
  for (const [name, k] of Object.entries(CONVS)) {
    const s = (seed += 10);
    c[`conv2d ${name}: output, dx, dfilter`] = () =>
      valueAndGrads((x, w) => tf.conv2d(x as Tensor4D, w as Tensor4D, k.stride, k.pad), [randn(k.x, s), randn(k.filter, s + 1, 0.3)], s + 2);
  }
  for (const [name, m] of Object.entries(MATMULS)) {
    const s = (seed += 10);
    c[`matMul ${name}: output, da, db`] = () =>
      valueAndGrads((a, b) => tf.matMul(a, b, m.transposeA, m.transposeB), [randn(m.a, s), randn(m.b, s + 1, 0.1)], s + 2);
  }
  c['fused matMul a b^T + bias, relu, K = 2048: output, da, db, dbias'] = () =>
    valueAndGrads(
      (a, b, bias) => tf.fused.matMul({ a: a as tf.Tensor2D, b: b as tf.Tensor2D, transposeB: true, bias, activation: 'relu' }),
      [randn([8, 2048], 3), randn([64, 2048], 4, 0.05), randn([64], 5, 0.1)],
      6,
    );
  for (const [shape, name] of [
    [[4, 5, 5, 7], '[4, 5, 5, 7]'],
    [[2, 9, 9, 32], '[2, 9, 9, 32] (tiny_resnet bn1)'],
    [[6, 10], '[6, 10] (BatchNorm1d)'],
  ] as const) {
    const s = (seed += 10);
    const C = shape[shape.length - 1];
    c[`batchNormTraining ${name}: y, mean, variance; dx, dscale, doffset`] = () => {
      const inputs = [randn([...shape], s, 2, 0.5), randn([C], s + 1, 0.2, 1), randn([C], s + 2, 0.1)];
      const { y, mean, variance } = batchNormTraining(inputs[0], inputs[1], inputs[2], 1e-5);
      const [, ...grads] = valueAndGrads((x, g, b) => batchNormTraining(x, g, b, 1e-5).y, inputs, s + 3);
      return [y, mean, variance, ...grads];
    };
    c[`batchNormTraining ${name}: gradients through mean and variance`] = () => {
      const [rm, rv] = [randn([C], s + 4), randn([C], s + 5)];
      return valueAndGrads(
        (x) => {
          const { y, mean, variance } = batchNormTraining(x, undefined, undefined, 1e-3);
          return tf.add(y, tf.add(tf.mul(mean, rm), tf.mul(variance, rv)));
        },
        [randn([...shape], s + 6)],
        s + 7,
      );
    };
  }
  c['relu: output, dx'] = () => valueAndGrads((x) => tf.relu(x), [randn([3, 7, 5], 201)], 202);
  c['gelu: output, dx'] = () => valueAndGrads((x) => gelu(x), [randn([3, 7, 5], 203, 2)], 204);
  c['maxPool 2x2 stride 2 valid: output, dx'] = () => valueAndGrads((x) => tf.maxPool(x as Tensor4D, 2, 2, 'valid'), [randn([2, 9, 9, 3], 205)], 206);
  c['maxPool 3x3 stride 2 same: output, dx'] = () => valueAndGrads((x) => tf.maxPool(x as Tensor4D, 3, 2, 'same'), [randn([2, 8, 8, 5], 207)], 208);
  c['avgPool 2x2 stride 2 valid: output, dx'] = () => valueAndGrads((x) => tf.avgPool(x as Tensor4D, 2, 2, 'valid'), [randn([2, 9, 9, 3], 209)], 210);
  c['avgPool 3x3 stride 1 same: output, dx'] = () => valueAndGrads((x) => tf.avgPool(x as Tensor4D, 3, 1, 'same'), [randn([2, 6, 7, 4], 211)], 212);
  c['softmax: output, dx'] = () => valueAndGrads((x) => tf.softmax(x), [randn([6, 11], 213, 3)], 214);
  c['logSoftmax over axis 1 (NT-Xent): output, dx'] = () => valueAndGrads((x) => tf.logSoftmax(x, 1), [randn([16, 16], 215, 5)], 216);
  for (const [op, kind, axes] of REDUCTIONS) {
    const s = (seed += 10);
    c[`${op} over ${axes ? `[${axes}]` : 'all axes'}: output, dx`] = () =>
      valueAndGrads((x) => (kind === 'sum' ? tf.sum(x, axes) : kind === 'mean' ? tf.mean(x, axes) : tf.max(x, axes)), [randn([3, 5, 7, 6], s)], s + 1);
  }
  // 16 inputs: more than one WebGPU shader may bind as storage buffers (8, output included), so grouped (src/core/kernels/webgpu/add-n.ts).
  for (const n of [3, 8, 16]) {
    c[`addN of ${n} tensors: output, dx of each`] = () =>
      valueAndGrads(
        (...xs) => tf.addN(xs),
        Array.from({ length: n }, (_, i) => randn([3, 5], 400 + i)),
        420 + n,
      );
  }
  // Arguments up to ±40 (LeJEPA's t·x); WGSL's own sin and cos are only ~2^-11 accurate (src/core/kernels/webgpu/trig.ts).
  c['sin: output, dx'] = () => valueAndGrads((x) => tf.sin(x), [randn([8, 64], 430, 15)], 431);
  c['cos: output, dx'] = () => valueAndGrads((x) => tf.cos(x), [randn([8, 64], 432, 15)], 433);
  c['layer norm as the ViT runs it ([B, T, D] over D): output, dx, dscale, doffset'] = () =>
    valueAndGrads(
      (x, g, b) => tf.reshape(groupNorm(tf.reshape(x, [-1, 24]), 1, g, b, 1e-6), x.shape),
      [randn([2, 5, 24], 301, 2, 1), randn([24], 302, 0.2, 1), randn([24], 303, 0.1)],
      304,
    );
  return c;
}

describe('kernels/webgpu: op by op against cpu-js', function () {
  const cases = computations();
  let results: { webgpu: Record<string, ReadBack>; reference: Record<string, ReadBack> };

  before(async () => {
    results = await onBothEngines(cases);
  });
  after(useCpu);

  for (const name of Object.keys(cases)) {
    it(name, () => assertMatches(results.webgpu[name], results.reference[name], name));
  }
});

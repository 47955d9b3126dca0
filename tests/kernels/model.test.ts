import assert from 'node:assert/strict';
import { batchNormTraining } from '../../src/core/native-kernels.js';
import { tf, type Tensor, type Tensor4D, type Variable } from '../../src/core/tf.js';
import { assertClose, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

/**
 * A small conv net built directly from tf ops: conv + bias + relu, max pool, a strided
 * conv with batch norm (tfjs composition and fused), a residual-style add, global average
 * pooling and a linear head. Returns the loss for a batch.
 */
function makeNet(seed: number): { vars: Variable[]; loss: (x: Tensor, fused: boolean) => tf.Scalar } {
  const w1 = tf.variable(randn([3, 3, 3, 16], seed, 0.3));
  const b1 = tf.variable(randn([16], seed + 1, 0.1));
  const w2 = tf.variable(randn([3, 3, 16, 32], seed + 2, 0.1));
  const gamma = tf.variable(tf.add(randn([32], seed + 3, 0.1), 1));
  const beta = tf.variable(randn([32], seed + 4, 0.1));
  const w3 = tf.variable(randn([1, 1, 16, 32], seed + 5, 0.2));
  const wFc = tf.variable(randn([32, 10], seed + 6, 0.2));
  const bFc = tf.variable(randn([10], seed + 7, 0.1));
  const loss = (x: Tensor, fused: boolean) => {
    const h1 = tf.relu(tf.add(tf.conv2d(x as Tensor4D, w1 as Tensor4D, 1, 'same'), b1));
    const p1 = tf.maxPool(h1 as Tensor4D, 2, 2, 'valid');
    const c2 = tf.conv2d(p1 as Tensor4D, w2 as Tensor4D, 2, 1);
    let n2: Tensor;
    if (fused) {
      n2 = batchNormTraining(c2, gamma, beta, 1e-5).y;
    } else {
      const { mean, variance } = tf.moments(c2, [0, 1, 2]);
      n2 = tf.batchNorm(c2, mean, variance, beta, gamma, 1e-5);
    }
    const h2 = tf.relu(tf.add(n2, tf.conv2d(p1 as Tensor4D, w3 as Tensor4D, 2, 'valid')));
    const pooled = tf.mean(h2, [1, 2]);
    const logits = tf.add(tf.matMul(pooled, wFc), bFc);
    return tf.mean(
      tf.square(
        tf.sub(
          logits,
          tf.oneHot(
            tf.tensor1d(
              Array.from({ length: x.shape[0] }, (_, i) => i % 10),
              'int32',
            ),
            10,
          ),
        ),
      ),
    ) as tf.Scalar;
  };
  return { vars: [w1, b1, w2, gamma, beta, w3, wFc, bFc], loss };
}

describe('kernels/native whole-model gradients', () => {
  before(requireNativeKernels);

  for (const fused of [false, true]) {
    it(`a small conv net has the same variable gradients with native and JS kernels (batch norm ${fused ? 'fused' : 'tfjs'})`, () => {
      const net = makeNet(7);
      try {
        const x = randn([6, 12, 12, 3], 99);
        const r = bothEngines(() => {
          const { value, grads } = tf.variableGrads(() => net.loss(x, fused), net.vars);
          return [value, ...net.vars.map((v) => grads[v.name])];
        });
        x.dispose();
        assertClose(r, `model gradients (fused=${fused})`, 1e-4);
        for (const k of ['Conv2D', 'Conv2DBackpropInput', 'Conv2DBackpropFilter', 'MaxPool', 'MaxPoolGrad', 'BatchMatMul']) {
          assertRanNatively(r.stats, k, 'model');
        }
        if (fused) assertRanNatively(r.stats, 'SslZooBatchNormTrainGrad', 'model');
        // The gradients are not trivially zero.
        r.native.values.slice(1).forEach((g, i) =>
          assert.ok(
            g.some((v) => v !== 0),
            `gradient ${i} is all zeros`,
          ),
        );
      } finally {
        tf.dispose(net.vars);
      }
    });
  }

  it('does not leak tensors over training steps', () => {
    const net = makeNet(3);
    const x = randn([4, 12, 12, 3], 5);
    try {
      const step = () => {
        const { value, grads } = tf.variableGrads(() => net.loss(x, true), net.vars);
        tf.dispose([value, ...Object.values(grads)]);
      };
      step();
      const before = tf.memory().numTensors;
      for (let i = 0; i < 3; i++) step();
      assert.equal(tf.memory().numTensors, before);
    } finally {
      tf.dispose([x, ...net.vars]);
    }
  });
});

import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { BatchNorm, type BatchMoments } from '../../src/core/layers.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { gradientCheck, maxAbsDiff, randn } from './helpers.js';

/** Per-channel mean and biased variance of an NHWC/NC array, in float64. */
function channelStats(values: ArrayLike<number>, channels: number): { mean: number[]; variance: number[]; count: number } {
  const count = values.length / channels;
  const mean = new Array<number>(channels).fill(0);
  const variance = new Array<number>(channels).fill(0);
  for (let i = 0; i < values.length; i++) mean[i % channels] += values[i] / count;
  for (let i = 0; i < values.length; i++) variance[i % channels] += (values[i] - mean[i % channels]) ** 2 / count;
  return { mean, variance, count };
}

describe('core/layers BatchNorm', () => {
  before(async () => {
    await initEngine('cpu');
  });

  it('has PyTorch parameters and buffers', () => {
    const bn = new BatchNorm(3);
    assert.deepEqual(
      Object.entries(bn.stateDict()).map(([name, v]) => [name, v.shape, v.dtype]),
      [
        ['weight', [3], 'float32'],
        ['bias', [3], 'float32'],
        ['runningMean', [3], 'float32'],
        ['runningVar', [3], 'float32'],
        ['numBatchesTracked', [], 'int32'],
      ],
    );
    assert.deepEqual(Array.from(bn.weight!.dataSync()), [1, 1, 1]);
    assert.deepEqual(Array.from(bn.bias!.dataSync()), [0, 0, 0]);
    assert.deepEqual(Array.from(bn.runningVar.dataSync()), [1, 1, 1]);
    assert.equal(bn.numParameters(), 6);
    const plain = new BatchNorm(3, { affine: false });
    assert.equal(plain.numParameters(), 0);
    bn.dispose();
    plain.dispose();
  });

  for (const shape of [
    [16, 4],
    [3, 4, 5, 4],
  ]) {
    it(`train mode normalises each channel to mean 0, variance 1 for [${shape}]`, () => {
      const bn = new BatchNorm(4);
      const x = tf.tidy(() => tf.add(tf.mul(randn(shape, 1), tf.tensor1d([1, 2, 0.5, 3])), tf.tensor1d([5, -1, 0, 2])));
      const y = bn.forward(x);
      assert.deepEqual(y.shape, shape);
      const { mean, variance } = channelStats(y.dataSync(), 4);
      for (let c = 0; c < 4; c++) {
        assert.ok(Math.abs(mean[c]) < 1e-5, `mean ${mean[c]}`);
        assert.ok(Math.abs(variance[c] - 1) < 1e-3, `variance ${variance[c]}`);
      }
      tf.dispose([x, y]);
      bn.dispose();
    });
  }

  it("updates the running statistics with PyTorch's formula (unbiased variance, momentum 0.1)", () => {
    const bn = new BatchNorm(3);
    const batches = [randn([2, 3, 3, 3], 2, 2), tf.tidy(() => tf.add(randn([2, 3, 3, 3], 3), 4))];
    let runningMean = [0, 0, 0];
    let runningVar = [1, 1, 1];
    for (const x of batches) {
      tf.dispose(bn.forward(x));
      const { mean, variance, count } = channelStats(x.dataSync(), 3);
      runningMean = runningMean.map((r, c) => 0.9 * r + 0.1 * mean[c]);
      runningVar = runningVar.map((r, c) => 0.9 * r + 0.1 * variance[c] * (count / (count - 1)));
    }
    assert.ok(maxAbsDiff(bn.runningMean.dataSync(), runningMean) < 1e-5);
    assert.ok(maxAbsDiff(bn.runningVar.dataSync(), runningVar) < 1e-5);
    assert.equal(bn.numBatchesTracked.dataSync()[0], 2);
    tf.dispose(batches);
    bn.dispose();
  });

  it('eval mode uses the running statistics and leaves them unchanged', () => {
    const bn = new BatchNorm(2, { eps: 1e-3 });
    bn.runningMean.assign(tf.tensor1d([1, -2]));
    bn.runningVar.assign(tf.tensor1d([4, 0.25]));
    bn.weight!.assign(tf.tensor1d([2, 1]));
    bn.bias!.assign(tf.tensor1d([0.5, 0]));
    bn.eval();
    const x = tf.tensor2d([
      [3, -2],
      [1, -1],
    ]);
    const y = bn.forward(x);
    const expected = [((3 - 1) / Math.sqrt(4.001)) * 2 + 0.5, (-2 + 2) / Math.sqrt(0.251), ((1 - 1) / Math.sqrt(4.001)) * 2 + 0.5, (-1 + 2) / Math.sqrt(0.251)];
    assert.ok(maxAbsDiff(y.dataSync(), expected) < 1e-5);
    assert.deepEqual(Array.from(bn.runningMean.dataSync()), [1, -2]);
    assert.equal(bn.numBatchesTracked.dataSync()[0], 0);
    tf.dispose([x, y]);
    bn.dispose();
  });

  it('refuses to train on a single value per channel, and checks the channel count', () => {
    const bn = new BatchNorm(3);
    const single = tf.zeros([1, 3]);
    assert.throws(() => bn.forward(single), /more than 1 value per channel/);
    const wrong = tf.zeros([4, 2]);
    assert.throws(() => bn.forward(wrong), /BatchNorm expects 3 features/);
    bn.eval();
    tf.dispose(bn.forward(single)); // fine in eval mode
    tf.dispose([single, wrong]);
    bn.dispose();
  });

  for (const [label, shape, affine] of [
    ['[B, H, W, C], affine', [4, 2, 3, 3], true],
    ['[B, C], affine', [6, 3], true],
    ['[B, C], no affine', [6, 3], false],
  ] as const) {
    it(`train-mode gradients match finite differences (${label})`, () => {
      const bn = new BatchNorm(3, { affine });
      if (affine) {
        bn.weight!.assign(tf.tensor1d([1.5, -0.7, 0.9]));
        bn.bias!.assign(tf.tensor1d([0.1, 0.2, -0.3]));
      }
      const x = tf.variable(randn([...shape], 21));
      const r = randn([...shape], 22);
      const loss = () => tf.sum(tf.mul(bn.forward(x), r)) as tf.Scalar;
      const vars = affine ? [x, bn.weight!, bn.bias!] : [x];
      for (const { error, norm } of gradientCheck(loss, vars)) {
        assert.ok(norm > 1e-2, 'gradient should not vanish');
        assert.ok(error < 1e-3, `relative error ${error}`);
      }
      tf.dispose([x, r]);
      bn.dispose();
    });
  }

  it('the running-statistics update is not recorded on the gradient tape', () => {
    const bn = new BatchNorm(2);
    const x = tf.variable(randn([5, 2], 3));
    const buffers = new Set([bn.runningMean.id, bn.runningVar.id, bn.numBatchesTracked.id]);
    let touchesBuffers = false;
    const { value, grads } = tf.variableGrads(() => {
      const y = tf.sum(tf.square(bn.forward(x))) as tf.Scalar;
      for (const node of tf.engine().state.activeTape) {
        if (Object.values(node.inputs).some((t) => t !== undefined && buffers.has(t.id))) touchesBuffers = true;
      }
      return y;
    }, [x, bn.weight!, bn.bias!]);
    assert.equal(touchesBuffers, false);
    assert.equal(bn.numBatchesTracked.dataSync()[0], 1);
    assert.deepEqual(Object.keys(grads).sort(), [x.name, bn.weight!.name, bn.bias!.name].sort());
    tf.dispose([value, x, grads]);
    bn.dispose();
  });

  it('subclasses can replace only the batch statistics (the SyncBatchNorm hook)', () => {
    class FixedMoments extends BatchNorm {
      calls = 0;
      protected override batchMoments(_x: Tensor, reduceAxes: number[]): BatchMoments {
        this.calls++;
        assert.deepEqual(reduceAxes, [0, 1, 2]);
        return { mean: tf.fill([2], 1), variance: tf.fill([2], 4), count: 10 };
      }
    }
    const bn = new FixedMoments(2, { eps: 0 });
    const x = tf.fill([1, 1, 1, 2], 5);
    const y = bn.forward(x);
    assert.equal(bn.calls, 1);
    assert.deepEqual(Array.from(y.dataSync()), [2, 2]);
    assert.ok(maxAbsDiff(bn.runningMean.dataSync(), [0.1, 0.1]) < 1e-7);
    assert.ok(maxAbsDiff(bn.runningVar.dataSync(), [0.9 + 0.1 * 4 * (10 / 9), 0.9 + 0.1 * 4 * (10 / 9)]) < 1e-6);
    tf.dispose([x, y]);
    bn.dispose();
  });

  it('frees every intermediate tensor', () => {
    const bn = new BatchNorm(3);
    const x = randn([4, 2, 2, 3], 5);
    tf.dispose(bn.forward(x)); // warm up
    const before = tf.memory().numTensors;
    for (let i = 0; i < 3; i++) {
      const { value, grads } = tf.variableGrads(() => tf.sum(tf.square(bn.forward(x))) as tf.Scalar);
      tf.dispose([value, grads]);
    }
    bn.eval();
    tf.dispose(bn.forward(x));
    assert.equal(tf.memory().numTensors, before);
    x.dispose();
    bn.dispose();
  });
});

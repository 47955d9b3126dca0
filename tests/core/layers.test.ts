import assert from 'node:assert/strict';
import { initEngine } from '../../src/core/engine.js';
import { Conv2d, Flatten, GELU, GlobalAvgPool, Identity, Linear, MaxPool2d, ReLU, Sequential, withoutGradientTape } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { gradientCheck, maxAbsDiff, randn } from './helpers.js';

/** PyTorch's output size of a convolution or pooling window. */
function torchOutSize(size: number, kernel: number, stride: number, padding: number): number {
  return Math.floor((size + 2 * padding - kernel) / stride) + 1;
}

/** Direct NHWC convolution with zero padding, the PyTorch definition. */
function naiveConv(x: Tensor, w: Tensor, stride: number, pad: number): Float64Array {
  const [B, H, W, C] = x.shape;
  const [K, , , O] = w.shape;
  const xs = x.dataSync();
  const ws = w.dataSync();
  const Ho = torchOutSize(H, K, stride, pad);
  const Wo = torchOutSize(W, K, stride, pad);
  const out = new Float64Array(B * Ho * Wo * O);
  for (let b = 0; b < B; b++)
    for (let i = 0; i < Ho; i++)
      for (let j = 0; j < Wo; j++)
        for (let o = 0; o < O; o++) {
          let s = 0;
          for (let ki = 0; ki < K; ki++)
            for (let kj = 0; kj < K; kj++) {
              const r = i * stride - pad + ki;
              const c = j * stride - pad + kj;
              if (r < 0 || r >= H || c < 0 || c >= W) continue;
              for (let ch = 0; ch < C; ch++) s += xs[((b * H + r) * W + c) * C + ch] * ws[((ki * K + kj) * C + ch) * O + o];
            }
          out[((b * Ho + i) * Wo + j) * O + o] = s;
        }
  return out;
}

/** Direct NHWC max pooling where padded positions never win (PyTorch's definition). */
function naiveMaxPool(x: Tensor, k: number, stride: number, pad: number): Float64Array {
  const [B, H, W, C] = x.shape;
  const xs = x.dataSync();
  const Ho = torchOutSize(H, k, stride, pad);
  const Wo = torchOutSize(W, k, stride, pad);
  const out = new Float64Array(B * Ho * Wo * C);
  for (let b = 0; b < B; b++)
    for (let i = 0; i < Ho; i++)
      for (let j = 0; j < Wo; j++)
        for (let ch = 0; ch < C; ch++) {
          let m = -Infinity;
          for (let r = i * stride - pad; r < i * stride - pad + k; r++)
            for (let c = j * stride - pad; c < j * stride - pad + k; c++)
              if (r >= 0 && r < H && c >= 0 && c < W) m = Math.max(m, xs[((b * H + r) * W + c) * C + ch]);
          out[((b * Ho + i) * Wo + j) * C + ch] = m;
        }
  return out;
}

describe('core/layers', () => {
  before(async () => {
    await initEngine('cpu');
  });

  describe('Linear', () => {
    it('maps [B, in] to [B, out] as x W + b, with PyTorch-style bounded uniform init', () => {
      const layer = new Linear(50, 7, { rng: new Rng(1) });
      assert.deepEqual(layer.weight.shape, [50, 7]);
      assert.deepEqual(layer.bias?.shape, [7]);
      const bound = 1 / Math.sqrt(50);
      for (const v of [layer.weight, layer.bias!]) {
        const values = v.dataSync();
        assert.ok(values.every((w) => Math.abs(w) <= bound));
        assert.ok(Math.max(...values) > bound * 0.8, 'init should fill the range');
      }
      const x = randn([3, 50], 2);
      const y = layer.forward(x);
      assert.deepEqual(y.shape, [3, 7]);
      const expected = tf.tidy(() => tf.add(tf.matMul(x, layer.weight), layer.bias!));
      assert.ok(maxAbsDiff(y.dataSync(), expected.dataSync()) < 1e-6);
      tf.dispose([x, y, expected]);
      layer.dispose();
    });

    it('has no bias with bias: false, and rejects a wrong feature count', () => {
      const layer = new Linear(4, 2, { bias: false, rng: new Rng(1) });
      assert.deepEqual(
        layer.namedParameters().map(([n]) => n),
        ['weight'],
      );
      const x = tf.zeros([2, 5]);
      assert.throws(() => layer.forward(x), /Linear expects 4 features.*\[2,5\]/);
      x.dispose();
      layer.dispose();
    });
  });

  describe('Conv2d', () => {
    it('gives PyTorch output sizes for integer padding, stride 1 and 2', () => {
      for (const [size, kernel, stride, padding] of [
        [8, 3, 2, 1],
        [7, 3, 2, 1],
        [9, 7, 2, 3],
        [16, 7, 2, 3],
        [5, 1, 2, 0],
        [6, 3, 1, 1],
        [32, 3, 1, 2],
      ]) {
        const conv = new Conv2d(2, 3, kernel, { stride, padding, rng: new Rng(0) });
        const x = tf.zeros([1, size, size, 2]);
        const y = conv.forward(x);
        const out = torchOutSize(size, kernel, stride, padding);
        assert.deepEqual(y.shape, [1, out, out, 3], `size ${size} kernel ${kernel} stride ${stride} padding ${padding}`);
        tf.dispose([x, y]);
        conv.dispose();
      }
    });

    it('computes the PyTorch convolution (symmetric zero padding) for odd sizes and stride 2', () => {
      const conv = new Conv2d(3, 4, 3, { stride: 2, padding: 1, bias: true, rng: new Rng(3) });
      const x = randn([2, 7, 7, 3], 4);
      const y = conv.forward(x);
      const expected = naiveConv(x, conv.weight, 2, 1);
      const bias = conv.bias!.dataSync();
      const withBias = expected.map((v, i) => v + bias[i % 4]);
      assert.ok(maxAbsDiff(y.dataSync(), withBias) < 1e-5);
      tf.dispose([x, y]);
      conv.dispose();
    });

    it('initialises weights [k, k, in, out] with He normal fan-out std, or PyTorch uniform on request', () => {
      const conv = new Conv2d(16, 32, 3, { rng: new Rng(5) });
      assert.deepEqual(conv.weight.shape, [3, 3, 16, 32]);
      assert.equal(conv.bias, undefined);
      const w = Array.from(conv.weight.dataSync());
      const std = Math.sqrt(w.reduce((s, v) => s + v * v, 0) / w.length);
      const expected = Math.sqrt(2 / (3 * 3 * 32));
      assert.ok(Math.abs(std / expected - 1) < 0.03, `std ${std} vs ${expected}`);
      const uniform = new Conv2d(16, 32, 3, { init: 'uniformFanIn', rng: new Rng(5) });
      const bound = 1 / Math.sqrt(3 * 3 * 16);
      assert.ok(uniform.weight.dataSync().every((v) => Math.abs(v) <= bound));
      conv.dispose();
      uniform.dispose();
    });

    it('rejects an input with the wrong channel count or rank', () => {
      const conv = new Conv2d(3, 4, 3, { padding: 1, rng: new Rng(0) });
      const x = tf.zeros([1, 4, 4, 1]);
      assert.throws(() => conv.forward(x), /Conv2d expects 3 features\/channels/);
      const flat = tf.zeros([1, 3]);
      assert.throws(() => conv.forward(flat), /rank-4/);
      tf.dispose([x, flat]);
      conv.dispose();
    });
  });

  describe('pooling and shape layers', () => {
    it('MaxPool2d(3, 2, 1) matches PyTorch: size formula and padding that never wins', () => {
      const pool = new MaxPool2d(3, 2, 1);
      for (const size of [7, 8, 9]) {
        // all-negative inputs: zero padding would wrongly win at the borders
        const x = tf.tidy(() => tf.sub(tf.abs(randn([2, size, size, 3], size)), 5));
        const y = pool.forward(x);
        const out = torchOutSize(size, 3, 2, 1);
        assert.deepEqual(y.shape, [2, out, out, 3]);
        assert.ok(maxAbsDiff(y.dataSync(), naiveMaxPool(x, 3, 2, 1)) === 0);
        tf.dispose([x, y]);
      }
    });

    it('MaxPool2d routes the gradient to the maximum of each window', () => {
      const pool = new MaxPool2d(2);
      const x = tf.tensor4d([1, 5, 2, 0, 3, 4, -1, 7, 6, 8, 9, -2, 0, 0, 0, 1], [1, 4, 4, 1]);
      const g = tf.grad((input: Tensor) => tf.sum(pool.forward(input)))(x);
      assert.deepEqual(Array.from(g.dataSync()), [0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0]);
      tf.dispose([x, g]);
    });

    it('MaxPool2d rejects padding larger than half the kernel', () => {
      assert.throws(() => new MaxPool2d(3, 2, 2), /padding 2 must be at most half the kernel 3/);
    });

    it('GlobalAvgPool, Flatten, ReLU and Identity have the documented shapes and values', () => {
      const x = randn([2, 3, 4, 5], 9);
      const pooled = new GlobalAvgPool().forward(x);
      assert.deepEqual(pooled.shape, [2, 5]);
      const mean = tf.tidy(() => tf.mean(tf.mean(x, 1), 1));
      assert.ok(maxAbsDiff(pooled.dataSync(), mean.dataSync()) < 1e-6);
      const flat = new Flatten().forward(x);
      assert.deepEqual(flat.shape, [2, 60]);
      const relu = new ReLU().forward(x);
      assert.ok(relu.dataSync().every((v, i) => v === Math.max(0, x.dataSync()[i])));
      const same = new Identity().forward(x);
      assert.notEqual(same, x, 'Identity returns a tensor the caller owns');
      assert.deepEqual(Array.from(same.dataSync()), Array.from(x.dataSync()));
      tf.dispose([x, pooled, mean, flat, relu, same]);
    });
  });

  describe('Sequential', () => {
    it('names children 0, 1, ... and applies them in order', () => {
      const rng = new Rng(1);
      const net = new Sequential(new Linear(4, 3, { rng }), new ReLU(), new Linear(3, 2, { rng }));
      assert.deepEqual(
        net.namedParameters().map(([n]) => n),
        ['0.weight', '0.bias', '2.weight', '2.bias'],
      );
      const x = randn([5, 4], 2);
      const y = net.forward(x);
      assert.deepEqual(y.shape, [5, 2]);
      const [first, , last] = net.namedChildren().map(([, m]) => m as Linear);
      const expected = tf.tidy(() => last.forward(tf.relu(first.forward(x))));
      assert.ok(maxAbsDiff(y.dataSync(), expected.dataSync()) < 1e-6);
      tf.dispose([x, y, expected]);
      net.dispose();
    });

    it('uses a child swapped in with replaceModule', () => {
      const net = new Sequential(new Linear(2, 2, { rng: new Rng(1) }), new ReLU());
      net.replaceModule('1', new Identity());
      const x = tf.tensor2d([[-1, -2]]);
      const y = net.forward(x);
      const first = net.namedChildren()[0][1] as Linear;
      const expected = first.forward(x);
      assert.deepEqual(Array.from(y.dataSync()), Array.from(expected.dataSync()));
      tf.dispose([x, y, expected]);
      net.dispose();
    });
  });

  describe('gradients', () => {
    it('Conv2d (stride 2, padding 1, bias) -> Flatten -> Linear: autodiff matches finite differences', () => {
      const rng = new Rng(11);
      const conv = new Conv2d(2, 3, 3, { stride: 2, padding: 1, bias: true, rng });
      const linear = new Linear(27, 4, { rng });
      const x = tf.variable(randn([2, 5, 5, 2], 12));
      const r = randn([2, 4], 13);
      const loss = () => tf.sum(tf.mul(linear.forward(new Flatten().forward(conv.forward(x))), r)) as tf.Scalar;
      const checks = gradientCheck(loss, [x, conv.weight, conv.bias!, linear.weight, linear.bias!]);
      for (const { error, norm } of checks) {
        assert.ok(norm > 1e-3, 'gradient should not vanish');
        assert.ok(error < 2e-4, `relative error ${error}`);
      }
      tf.dispose([x, r]);
      conv.dispose();
      linear.dispose();
    });
  });

  it('withoutGradientTape keeps ops off the active gradient tape', () => {
    const a = tf.variable(tf.scalar(2));
    const tape = () => tf.engine().state.activeTape?.length ?? 0;
    const added: number[] = [];
    const { value, grads } = tf.variableGrads(() => {
      const y = tf.mul(a, a);
      let before = tape();
      withoutGradientTape(() => tf.dispose(tf.add(y, 1)));
      added.push(tape() - before);
      before = tape();
      tf.dispose(tf.add(y, 1));
      added.push(tape() - before);
      return y as tf.Scalar;
    }, [a]);
    assert.equal(added[0], 0, 'paused: nothing recorded');
    assert.ok(added[1] > 0, 'control: the same op is recorded normally');
    assert.equal(grads[a.name].dataSync()[0], 4);
    tf.dispose([value, a, grads]);
  });

  it('withoutGradientTape allows a gradient of its own, treated as a constant by the enclosing one', () => {
    const a = tf.variable(tf.scalar(3));
    let tapeAfter: unknown;
    const { value, grads } = tf.variableGrads(() => {
      const y = tf.mul(a, a); // dy/da = 2a
      // d(y^3)/dy = 3y^2 = 243, computed on a fresh tape and used as a constant factor.
      const inner = withoutGradientTape(() => tf.grad((t: Tensor) => tf.pow(t, 3))(y));
      tapeAfter = tf.engine().state.activeTape;
      return tf.mul(y, inner) as tf.Scalar;
    }, [a]);
    assert.ok(Array.isArray(tapeAfter), 'the enclosing tape is restored');
    assert.equal(value.dataSync()[0], 9 * 243);
    assert.equal(grads[a.name].dataSync()[0], 2 * 3 * 243, 'the inner gradient is a constant: d(y * c)/da = 2a * c');
    assert.equal(tf.engine().state.activeTape, null, 'no tape left open');
    tf.dispose([value, a, grads]);
  });

  it('GELU is the exact erf form (PyTorch nn.GELU values) and its gradient matches finite differences', () => {
    // torch.nn.functional.gelu(torch.tensor([-3, -1, -0.5, 0, 0.5, 1, 3], dtype=torch.float64))
    const x = [-3, -1, -0.5, 0, 0.5, 1, 3];
    const expected = [-0.0040496940948903, -0.15865525393145707, -0.15426876936299344, 0, 0.34573123063700656, 0.8413447460685429, 2.995950305905];
    const y = new GELU().forward(tf.tensor1d(x));
    const got = y.dataSync();
    for (let i = 0; i < x.length; i++) assert.ok(Math.abs(got[i] - expected[i]) < 2e-6, `gelu(${x[i]}) = ${got[i]}, expected ${expected[i]}`);
    y.dispose();
    // The tanh approximation differs by ~1e-4 near |x| = 2: the erf form is what is computed.
    const at2 = tf.tidy(() => new GELU().forward(tf.scalar(2)).dataSync()[0]);
    assert.ok(Math.abs(at2 - 1.9544997361036416) < 2e-6, `gelu(2) = ${at2}`);
    const v = tf.variable(randn([5, 4], 7, 2));
    const [check] = gradientCheck(() => tf.sum(tf.mul(new GELU().forward(v), tf.reshape(tf.linspace(-1, 1, 20), [5, 4]))), [v]);
    assert.ok(check.error < 1e-2, `relative gradient error ${check.error}`);
    v.dispose();
  });
});

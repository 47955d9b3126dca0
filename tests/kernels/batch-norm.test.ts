import assert from 'node:assert/strict';
import { batchNormTraining, nativeKernelStats, restoreJsKernels } from '../../src/core/native-kernels.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { assertClose, assertFallbackGradients, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

describe('kernels/native fused training batch norm', () => {
  before(requireNativeKernels);

  /** y, mean, variance, and the gradients of a loss using all three, w.r.t. x, scale, offset. */
  function run(shape: number[], seed: number, affine: boolean, shift = 0, scaleOfX = 1): Tensor[] {
    const c = shape[shape.length - 1];
    const x = randn(shape, seed, scaleOfX, shift);
    const scale = randn([c], seed + 1);
    const offset = randn([c], seed + 2);
    const wy = randn(shape, seed + 3);
    const wm = randn([c], seed + 4);
    const wv = randn([c], seed + 5);
    const f = (a: Tensor, s: Tensor, o: Tensor) => {
      const { y, mean, variance } = batchNormTraining(a, affine ? s : undefined, affine ? o : undefined, 1e-5);
      return tf.addN([tf.sum(tf.mul(y, wy)), tf.sum(tf.mul(mean, wm)), tf.sum(tf.mul(variance, wv))]);
    };
    const { y, mean, variance } = batchNormTraining(x, affine ? scale : undefined, affine ? offset : undefined, 1e-5);
    const grads = affine ? tf.grads(f)([x, scale, offset]) : [tf.grad((a: Tensor) => f(a, scale, offset))(x)];
    return [y, mean, variance, ...grads];
  }

  it('matches tf.moments + tf.batchNorm (values and gradients), NHWC and [B, C]', () => {
    const shapes = [
      [16, 7, 6, 8],
      [64, 32],
      [3, 5, 4, 33],
      [2, 1, 1, 5],
    ];
    shapes.forEach((shape, i) => {
      for (const affine of [true, false]) {
        const what = `batchNormTraining [${shape}] affine=${affine}`;
        const r = bothEngines(() => run(shape, 10 * i, affine));
        assertClose(r, what, 1e-4);
        assertRanNatively(r.stats, 'SslZooBatchNormTrain', what);
        assertRanNatively(r.stats, 'SslZooBatchNormTrainGrad', what);
      }
    });
  });

  it('stays accurate for a large mean and small spread', () => {
    const r = bothEngines(() => run([32, 8, 8, 4], 5, true, 100, 0.1));
    assertClose(r, 'mean 100, std 0.1', 1e-3);
  });

  it('its gradient is computed with tfjs ops when the native kernels are removed between forward and backward', () => {
    const x = randn([6, 4, 4, 8], 21);
    const scale = randn([8], 22);
    const offset = randn([8], 23);
    const [wy, wm, wv] = [randn([6, 4, 4, 8], 24), randn([8], 25), randn([8], 26)];
    assertFallbackGradients(
      ([a, s, o], removeNative) => {
        const { y, mean, variance } = batchNormTraining(a, s, o, 1e-5);
        removeNative();
        return tf.addN([tf.sum(tf.mul(y, wy)), tf.sum(tf.mul(mean, wm)), tf.sum(tf.mul(variance, wv))]);
      },
      [x, scale, offset],
    );
    tf.dispose([wy, wm, wv]);
  });

  it('is the tfjs composition when the native kernels are not installed', () => {
    restoreJsKernels();
    const before = nativeKernelStats().SslZooBatchNormTrain?.native ?? 0;
    const out = tf.tidy(() => run([4, 3, 3, 2], 1, true).map((t) => t.shape));
    assert.deepEqual(out.slice(0, 3), [[4, 3, 3, 2], [2], [2]]);
    requireNativeKernels();
    assert.equal(nativeKernelStats().SslZooBatchNormTrain?.native ?? 0, before);
  });
});

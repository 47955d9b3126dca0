import assert from 'node:assert/strict';
import { GroupNorm, LayerNorm } from '../../src/core/layers.js';
import { groupNorm, nativeKernelStats, restoreJsKernels } from '../../src/core/native-kernels.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { assertClose, assertFallbackGradients, assertRanNatively, bothEngines, randn, requireNativeKernels } from './helpers.js';

describe('kernels/native fused group norm', () => {
  before(requireNativeKernels);

  /** y and the gradients of a weighted sum of y w.r.t. x, scale, offset (or x alone). */
  function run(shape: number[], groups: number, seed: number, affine: boolean, shift = 0, scaleOfX = 1): Tensor[] {
    const c = shape[shape.length - 1];
    const x = randn(shape, seed, scaleOfX, shift);
    const scale = randn([c], seed + 1);
    const offset = randn([c], seed + 2);
    const wy = randn(shape, seed + 3);
    const f = (a: Tensor, s: Tensor, o: Tensor) => tf.sum(tf.mul(groupNorm(a, groups, affine ? s : undefined, affine ? o : undefined, 1e-5), wy));
    const y = groupNorm(x, groups, affine ? scale : undefined, affine ? offset : undefined, 1e-5);
    const grads = affine ? tf.grads(f)([x, scale, offset]) : [tf.grad((a: Tensor) => f(a, scale, offset))(x)];
    return [y, ...grads];
  }

  it('matches the tfjs composition (values and gradients): NHWC and [B, C], 1 to C groups', () => {
    const cases: [number[], number][] = [
      [[8, 7, 6, 32], 8],
      [[16, 5, 5, 12], 1],
      [[6, 3, 4, 6], 6],
      [[64, 32], 16],
      [[5, 33], 3],
      [[3, 1, 1, 6], 2],
    ];
    cases.forEach(([shape, groups], i) => {
      for (const affine of [true, false]) {
        const what = `groupNorm [${shape}] G=${groups} affine=${affine}`;
        const r = bothEngines(() => run(shape, groups, 10 * i, affine));
        assertClose(r, what, 1e-4);
        assertRanNatively(r.stats, 'SslZooGroupNorm', what);
        assertRanNatively(r.stats, 'SslZooGroupNormGrad', what);
      }
    });
  });

  it('stays accurate for a large mean and small spread', () => {
    const r = bothEngines(() => run([4, 8, 8, 16], 4, 5, true, 100, 0.1));
    assertClose(r, 'mean 100, std 0.1', 1e-3);
  });

  it('GroupNorm and LayerNorm layers run it, forward and backward', () => {
    const gn = new GroupNorm(4, 8);
    const ln = new LayerNorm(8);
    const r = bothEngines(() => {
      const x = randn([3, 5, 5, 8], 7);
      const wy = randn([3, 5, 5, 8], 8);
      const f = (a: Tensor) => tf.add(tf.sum(tf.mul(gn.forward(a), wy)), tf.sum(tf.mul(ln.forward(a), tf.square(wy))));
      const { value, grads } = tf.variableGrads(() => f(x) as tf.Scalar, [gn.weight!, gn.bias!, ln.weight!, ln.bias!]);
      return [value, tf.grad(f)(x), ...Object.values(grads)];
    });
    assertClose(r, 'GroupNorm(4, 8) + LayerNorm(8)', 1e-4);
    assertRanNatively(r.stats, 'SslZooGroupNorm', 'layers');
    assertRanNatively(r.stats, 'SslZooGroupNormGrad', 'layers');
    gn.dispose();
    ln.dispose();
  });

  it('its gradient is computed with tfjs ops when the native kernels are removed between forward and backward', () => {
    const x = randn([4, 5, 5, 8], 11);
    const scale = randn([8], 12);
    const offset = randn([8], 13);
    const wy = randn([4, 5, 5, 8], 14);
    assertFallbackGradients(
      ([a, s, o], removeNative) => {
        const y = groupNorm(a, 4, s, o, 1e-5);
        removeNative();
        return tf.sum(tf.mul(y, wy));
      },
      [x, scale, offset],
    );
    wy.dispose();
  });

  it('is the tfjs composition when the native kernels are not installed', () => {
    restoreJsKernels();
    const before = nativeKernelStats().SslZooGroupNorm?.native ?? 0;
    const out = tf.tidy(() => run([4, 3, 3, 4], 2, 1, true).map((t) => t.shape));
    assert.deepEqual(out, [[4, 3, 3, 4], [4, 3, 3, 4], [4], [4]]);
    requireNativeKernels();
    assert.equal(nativeKernelStats().SslZooGroupNorm?.native ?? 0, before);
  });

  it('does not leak tensors', () => {
    const x = randn([4, 3, 3, 8], 3);
    const before = tf.memory().numTensors;
    const y = groupNorm(x, 2, undefined, undefined, 1e-5);
    y.dispose();
    assert.equal(tf.memory().numTensors, before);
    x.dispose();
  });
});

import assert from 'node:assert/strict';
import { tf, type Tensor } from '../../src/core/tf.js';
import { SingleProcessGroup, type ProcessGroup } from '../../src/core/process-group.js';
import { byolLoss } from '../../src/losses/index.js';
import { gradCheck, randn, rowsOf, Rng, useCpuEngine } from './helpers.js';

function cos(a: number[], b: number[]): number {
  return a.reduce((s, x, i) => s + x * b[i], 0) / (Math.hypot(...a) * Math.hypot(...b));
}

describe('losses/byolLoss', () => {
  before(useCpuEngine);

  it('is 0 when predictions equal the targets and 8 when they are opposite', () => {
    const rng = new Rng(1);
    tf.tidy(() => {
      const z1 = randn(rng, 5, 6);
      const z2 = randn(rng, 5, 6);
      const zero = byolLoss(tf.mul(z2, 2) as tf.Tensor2D, z1, z1, z2).dataSync()[0];
      assert.ok(Math.abs(zero) < 1e-6, `${zero}`);
      const eight = byolLoss(tf.neg(z2) as tf.Tensor2D, tf.mul(z1, -3) as tf.Tensor2D, z1, z2).dataSync()[0];
      assert.ok(Math.abs(eight - 8) < 1e-5, `${eight}`);
    });
  });

  it('matches the per-sample formula on random inputs', () => {
    const rng = new Rng(2);
    tf.tidy(() => {
      const [p1, p2, z1, z2] = [0, 1, 2, 3].map(() => randn(rng, 7, 4));
      const v = byolLoss(p1, p2, z1, z2).dataSync()[0];
      const [a, b, c, d] = [p1, p2, z1, z2].map(rowsOf);
      let ref = 0;
      for (let i = 0; i < 7; i++) ref += 2 - 2 * cos(a[i], d[i]) + (2 - 2 * cos(b[i], c[i]));
      ref /= 7;
      assert.ok(Math.abs(v - ref) < 1e-5 * ref, `${v} vs ${ref}`);
    });
  });

  it('gives exactly zero gradient to z1, z2 (detached) and a correct one to p1, p2', () => {
    const rng = new Rng(3);
    const xs = [0, 1, 2, 3].map(() => randn(rng, 6, 5));
    const f = (p1: tf.Tensor2D, p2: tf.Tensor2D, z1: tf.Tensor2D, z2: tf.Tensor2D) => byolLoss(p1, p2, z1, z2);
    const grads = tf.grads((...a: Tensor[]) => f(...(a as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.Tensor2D])))(xs);
    for (const g of grads.slice(2)) assert.ok(g.dataSync().every((x) => x === 0));
    assert.ok(grads.slice(0, 2).every((g) => g.dataSync().some((x) => x !== 0)));
    tf.dispose(grads);
    const { error, halvedError } = gradCheck(f, xs, rng, [0, 1]);
    tf.dispose(xs);
    assert.ok(error < 1e-2, `relative error ${error}`);
    assert.ok(halvedError > 0.3, `a halved gradient was not caught (${halvedError})`);
  });

  it('needs no global batch: any world size is accepted (per-sample mean per rank)', () => {
    const rng = new Rng(4);
    const two: ProcessGroup = Object.assign(Object.create(new SingleProcessGroup()) as ProcessGroup, {
      worldSize: 2,
      rank: 1,
    });
    tf.tidy(() => {
      const [p1, p2, z1, z2] = [0, 1, 2, 3].map(() => randn(rng, 3, 4));
      assert.equal(byolLoss(p1, p2, z1, z2, two).dataSync()[0], byolLoss(p1, p2, z1, z2).dataSync()[0]);
      assert.throws(() => byolLoss(p1, p2, z1, randn(rng, 2, 4)), /same shape/);
    });
  });
});

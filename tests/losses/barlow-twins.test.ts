import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { BARLOW_TWINS_DEFAULTS, barlowTwinsLoss, barlowTwinsLossWithTerms } from '../../src/losses/index.js';
import { gradCheck, randn, rowsOf, Rng, useCpuEngine } from './helpers.js';

/** Independent float64 Barlow Twins in plain loops. */
function referenceBarlow(z1: number[][], z2: number[][], lambd: number, scale: number, eps: number) {
  const n = z1.length;
  const d = z1[0].length;
  const standardise = (z: number[][]) => {
    const out = z.map((r) => r.slice());
    for (let j = 0; j < d; j++) {
      const mean = z.reduce((a, r) => a + r[j], 0) / n;
      const v = z.reduce((a, r) => a + (r[j] - mean) ** 2, 0) / n;
      for (let i = 0; i < n; i++) out[i][j] = (z[i][j] - mean) / Math.sqrt(v + eps);
    }
    return out;
  };
  const a = standardise(z1);
  const b = standardise(z2);
  let on = 0;
  let off = 0;
  for (let i = 0; i < d; i++) {
    for (let j = 0; j < d; j++) {
      let c = 0;
      for (let k = 0; k < n; k++) c += a[k][i] * b[k][j];
      c /= n;
      if (i === j) on += (1 - c) ** 2;
      else off += c * c;
    }
  }
  return { loss: scale * (on + lambd * off), on, off };
}

describe('losses/barlowTwinsLoss', () => {
  before(useCpuEngine);

  it('exports solo-learn’s defaults (λ 0.0051, scale 0.1) and BatchNorm’s eps 1e-5', () => {
    assert.deepEqual({ ...BARLOW_TWINS_DEFAULTS }, { lambd: 0.0051, scale: 0.1, eps: 1e-5 });
  });

  it('is ~0 for identical views with uncorrelated columns, and scale·4D for opposite views', () => {
    // Columns centred, orthogonal, variance 1: c = I·(1/(1+eps)) for z2 = z1, −I·(...) for z2 = −z1.
    const z = tf.tensor2d(
      [
        [1, 1, 1],
        [-1, 1, -1],
        [1, -1, -1],
        [-1, -1, 1],
      ],
      [4, 3],
    );
    const opts = { lambd: 0.0051, scale: 0.5 };
    const same = barlowTwinsLossWithTerms(z, tf.clone(z), opts);
    const onSame = same.onDiag.dataSync()[0];
    assert.ok(Math.abs(same.loss.dataSync()[0]) < 1e-8);
    assert.ok(Math.abs(onSame - 3 * (1 - 1 / (1 + 1e-5)) ** 2) < 1e-9, `${onSame}`);
    assert.ok(same.offDiag.dataSync()[0] < 1e-12);
    const c = 1 / (1 + 1e-5);
    const opposite = barlowTwinsLoss(z, tf.neg(z) as tf.Tensor2D, opts).dataSync()[0];
    const expected = 0.5 * 3 * (1 + c) ** 2;
    assert.ok(Math.abs(opposite - expected) < 1e-5 * expected, `${opposite} vs ${expected}`);
    tf.dispose([z, same.loss, same.onDiag, same.offDiag]);
  });

  it('is invariant to per-column shifts and positive scales of each view (batch standardisation)', () => {
    const rng = new Rng(2);
    tf.tidy(() => {
      const z1 = randn(rng, 10, 4);
      const z2 = randn(rng, 10, 4);
      const opts = { lambd: 0.0051, scale: 1, eps: 0 };
      const a = barlowTwinsLoss(z1, z2, opts).dataSync()[0];
      const moved = tf.add(tf.mul(z1, tf.tensor1d([3, 0.5, 2, 7])), tf.tensor1d([1, -2, 5, 0])) as tf.Tensor2D;
      const b = barlowTwinsLoss(moved, z2, opts).dataSync()[0];
      assert.ok(Math.abs(a - b) < 1e-5 * a, `${a} vs ${b}`);
    });
  });

  it('matches an independent float64 loop implementation (value and both terms)', () => {
    const rng = new Rng(9);
    for (const [n, d, lambd, scale] of [
      [8, 4, 0.0051, 0.1],
      [12, 16, 0.05, 1.0],
      [5, 3, 1.0, 0.025],
    ] as const) {
      tf.tidy(() => {
        const z1 = randn(rng, n, d, 1.5, 0.3);
        const z2 = tf.add(z1, randn(rng, n, d, 0.7)) as tf.Tensor2D;
        const t = barlowTwinsLossWithTerms(z1, z2, { lambd, scale });
        const ref = referenceBarlow(rowsOf(z1), rowsOf(z2), lambd, scale, 1e-5);
        const got = { loss: t.loss.dataSync()[0], on: t.onDiag.dataSync()[0], off: t.offDiag.dataSync()[0] };
        for (const k of ['loss', 'on', 'off'] as const) {
          assert.ok(Math.abs(got[k] - ref[k]) < 2e-5 * Math.abs(ref[k]) + 1e-7, `N=${n} D=${d} ${k}: ${got[k]} vs ${ref[k]}`);
        }
      });
    }
  });

  it('passes a finite-difference gradient check for z1 and z2 (and rejects a halved gradient)', () => {
    const rng = new Rng(21);
    const xs = [randn(rng, 8, 5), randn(rng, 8, 5)];
    const f = (a: tf.Tensor2D, b: tf.Tensor2D) => barlowTwinsLoss(a, b, { lambd: 0.05, scale: 1 });
    const { error, halvedError } = gradCheck(f, xs, rng);
    tf.dispose(xs);
    assert.ok(error < 1e-2, `relative error ${error}`);
    assert.ok(halvedError > 0.3, `a halved gradient was not caught (${halvedError})`);
  });

  // W > 1 (real processes): tests/distributed/losses.full.test.ts.
  it('rejects bad options and mismatched shapes', () => {
    const rng = new Rng(4);
    tf.tidy(() => {
      const z = randn(rng, 4, 3);
      assert.throws(() => barlowTwinsLoss(z, z, { lambd: -1, scale: 1 }), /lambd/);
      assert.throws(() => barlowTwinsLoss(z, randn(rng, 4, 2), BARLOW_TWINS_DEFAULTS), /same shape/);
    });
  });
});

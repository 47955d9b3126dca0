import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { VICREG_DEFAULTS, vicregLoss, vicregLossWithTerms } from '../../src/losses/index.js';
import { gradCheck, randn, rowsOf, Rng, useCpuEngine } from './helpers.js';

/** Independent float64 VICReg in plain loops (docs/loss-case.md conventions). */
function referenceVicreg(z1: number[][], z2: number[][], w = VICREG_DEFAULTS) {
  const n = z1.length;
  const d = z1[0].length;
  let inv = 0;
  for (let i = 0; i < n; i++) for (let j = 0; j < d; j++) inv += (z1[i][j] - z2[i][j]) ** 2;
  inv /= n * d;
  const stats = (z: number[][]) => {
    const mean = Array.from({ length: d }, (_, j) => z.reduce((a, r) => a + r[j], 0) / n);
    let hinge = 0;
    let off = 0;
    for (let a = 0; a < d; a++) {
      for (let b = 0; b < d; b++) {
        let c = 0;
        for (let i = 0; i < n; i++) c += (z[i][a] - mean[a]) * (z[i][b] - mean[b]);
        c /= n - 1;
        if (a === b) hinge += Math.max(0, w.gamma - Math.sqrt(c + w.eps));
        else off += c * c;
      }
    }
    return { hinge: hinge / d, off };
  };
  const s1 = stats(z1);
  const s2 = stats(z2);
  const variance = (s1.hinge + s2.hinge) / 2;
  const covariance = (s1.off + s2.off) / d;
  return {
    loss: w.simWeight * inv + w.varWeight * variance + w.covWeight * covariance,
    invariance: inv,
    variance,
    covariance,
  };
}

describe('losses/vicregLoss', () => {
  before(useCpuEngine);

  it('exports the paper’s defaults (25, 25, 1, γ 1, eps 1e-4)', () => {
    assert.deepEqual({ ...VICREG_DEFAULTS }, { simWeight: 25, varWeight: 25, covWeight: 1, gamma: 1, eps: 1e-4 });
  });

  it('matches the closed form for identical views with orthogonal columns of known spread', () => {
    // Columns ±a (a = 0.5 and 2) over N = 4: centred, orthogonal; unbiased var = 4a²/3.
    const z = tf.tensor2d(
      [
        [0.5, 2],
        [-0.5, 2],
        [0.5, -2],
        [-0.5, -2],
      ],
      [4, 2],
    );
    const t = vicregLossWithTerms(z, tf.clone(z), VICREG_DEFAULTS);
    const std = (a: number) => Math.sqrt((4 * a * a) / 3 + 1e-4);
    const variance = (Math.max(0, 1 - std(0.5)) + Math.max(0, 1 - std(2))) / 2; // mean over D = 2, averaged over 2 views
    assert.equal(t.invariance.dataSync()[0], 0);
    assert.ok(t.covariance.dataSync()[0] < 1e-12);
    assert.ok(Math.abs(t.variance.dataSync()[0] - variance) < 1e-6, `${t.variance.dataSync()[0]} vs ${variance}`);
    assert.ok(Math.abs(t.loss.dataSync()[0] - 25 * variance) < 1e-5);
    tf.dispose([z, t.loss, t.invariance, t.variance, t.covariance]);
  });

  it('matches an independent float64 loop implementation (value and terms)', () => {
    const rng = new Rng(5);
    for (const [n, d] of [
      [8, 4],
      [12, 10],
    ] as const) {
      tf.tidy(() => {
        const z1 = randn(rng, n, d, 0.8, 0.2);
        const z2 = tf.add(z1, randn(rng, n, d, 0.5)) as tf.Tensor2D;
        const t = vicregLossWithTerms(z1, z2, VICREG_DEFAULTS);
        const ref = referenceVicreg(rowsOf(z1), rowsOf(z2));
        for (const k of ['loss', 'invariance', 'variance', 'covariance'] as const) {
          const got = t[k].dataSync()[0];
          assert.ok(Math.abs(got - ref[k]) < 2e-5 * Math.abs(ref[k]) + 1e-7, `N=${n} D=${d} ${k}: ${got} vs ${ref[k]}`);
        }
      });
    }
  });

  it('passes a finite-difference gradient check for z1 and z2 (and rejects a halved gradient)', () => {
    const rng = new Rng(8);
    // std ≈ 0.6 < γ: the variance hinge is active, away from its kink.
    const xs = [randn(rng, 8, 5, 0.6), randn(rng, 8, 5, 0.6)];
    const f = (a: tf.Tensor2D, b: tf.Tensor2D) => vicregLoss(a, b, VICREG_DEFAULTS);
    const { error, halvedError } = gradCheck(f, xs, rng);
    tf.dispose(xs);
    assert.ok(error < 1e-2, `relative error ${error}`);
    assert.ok(halvedError > 0.3, `a halved gradient was not caught (${halvedError})`);
  });

  // W > 1 (real processes): tests/distributed/losses.full.test.ts.
  it('refuses N < 2', () => {
    const rng = new Rng(6);
    tf.tidy(() => {
      const one = randn(rng, 1, 3);
      assert.throws(() => vicregLoss(one, one, VICREG_DEFAULTS), /at least 2/);
    });
  });
});

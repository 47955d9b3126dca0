import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { VICREG_DEFAULTS, vicregLoss, vicregLossWithTerms } from '../../src/losses/index.js';
import { batchLayout } from '../../src/losses/global-batch.js';
import { covarianceStatistics } from '../../src/losses/vicreg.js';
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

describe('losses/covarianceStatistics (the covariances kept once, their gradient by hand)', () => {
  before(useCpuEngine);

  /** The same statistics through autodiff of the plain `[K, C, C]` covariances (what it replaces). */
  function plain(sets: tf.Tensor3D): tf.Tensor2D {
    const [, b, c] = sets.shape;
    const centred = tf.sub(sets, tf.mean(sets, 1, true));
    const cov = tf.div(tf.matMul(centred, centred, true, false), b - 1);
    const variances = tf.sum(tf.mul(cov, tf.eye(c)), 2);
    const off = tf.sum(tf.square(tf.mul(cov, tf.sub(1, tf.eye(c)))), 2);
    return tf.concat([variances, tf.sum(off, 1, true)], 1) as tf.Tensor2D;
  }

  it("values: each set's column variances and Σ_{c≠d} C_cd² (float64 loops); gradient of any weighting of them: that of autodiff through the [C, C] matrices", () => {
    const rng = new Rng(12);
    const [k, b, c] = [3, 7, 5];
    const sets = tf.tensor3d(rng.normalArray(k * b * c, 0.5, 1.3), [k, b, c]);
    const weights = tf.tensor2d(rng.normalArray(k * (c + 1), 0, 1), [k, c + 1]); // every output column its own upstream gradient
    const layout = batchLayout('test', b, undefined);
    const ours = covarianceStatistics(sets, layout);
    const values = sets.arraySync();
    const got = ours.arraySync();
    for (let s = 0; s < k; s++) {
      const rows = values[s]!;
      const mean = Array.from({ length: c }, (_, j) => rows.reduce((a, r) => a + r[j]!, 0) / b);
      const cov = (p: number, q: number) => rows.reduce((a, r) => a + (r[p]! - mean[p]!) * (r[q]! - mean[q]!), 0) / (b - 1);
      let off = 0;
      for (let p = 0; p < c; p++) {
        assert.ok(Math.abs(got[s]![p]! - cov(p, p)) < 1e-5 * (1 + cov(p, p)), `set ${s} variance ${p}`);
        for (let q = 0; q < c; q++) if (p !== q) off += cov(p, q) ** 2;
      }
      assert.ok(Math.abs(got[s]![c]! - off) < 1e-5 * (1 + off), `set ${s} off-diagonal: ${got[s]![c]} vs ${off}`);
    }
    const grad = (f: (x: tf.Tensor3D) => tf.Tensor2D) =>
      tf
        .grad((x: tf.Tensor) => tf.sum(tf.mul(f(x as tf.Tensor3D), weights)))(sets)
        .dataSync();
    const [mine, reference] = [grad((x) => covarianceStatistics(x, layout)), grad(plain)];
    const scale = Math.max(...reference.map(Math.abs));
    const worst = Math.max(...mine.map((g, i) => Math.abs(g - reference[i]!)));
    assert.ok(scale > 0.1 && worst < 1e-5 * scale, `worst |difference| ${worst} of ${scale}`);
    tf.dispose([sets, weights, ours]);
  });
});

/**
 * Unit tests of the zoo losses with many positives or decoupled ones: SupCon (equals NT-Xent
 * with two views and distinct labels; an independent float64 loop; label invariances) and
 * DCL / DCLW (float64 loop; DCLW → DCL as σ → ∞ or with equal positive similarities;
 * DCL < NT-Xent), with finite-difference gradient checks.
 */
import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { dclLoss, l2NormalizeRows, ntXentLoss, supconLoss } from '../../src/losses/index.js';
import { fdProbe, gradCheck, probeError, randn, rowsOf, Rng, useCpuEngine } from './helpers.js';
import { dot, logSumExp, normalize, referenceDcl, referenceSupcon } from './zoo-reference.js';

type T2 = tf.Tensor2D;

function close(v: number, expected: number, rel = 1e-5, abs = 1e-6): void {
  assert.ok(Math.abs(v - expected) <= abs + rel * Math.abs(expected), `${v} vs ${expected}`);
}

function labelsOf(values: number[]): tf.Tensor1D {
  return tf.tensor1d(values, 'int32');
}

describe('losses/supconLoss', () => {
  before(useCpuEngine);

  it('equals NT-Xent with two views and all labels distinct', () => {
    const rng = new Rng(31);
    for (const [b, d, t] of [
      [6, 5, 0.1],
      [4, 8, 0.5],
      [1, 3, 0.2],
    ] as const) {
      tf.tidy(() => {
        const [z1, z2] = [randn(rng, b, d), randn(rng, b, d, 2)];
        const labels = labelsOf(Array.from({ length: b }, (_, i) => 7 * i + 3));
        const sup = supconLoss([z1, z2], labels, { temperature: t }).dataSync()[0]!;
        const nt = ntXentLoss(z1, z2, { temperature: t }).dataSync()[0]!;
        close(sup, nt);
      });
    }
  });

  it('matches an independent float64 loop (solo-learn’s exp-then-log) with three views and repeated labels', () => {
    const rng = new Rng(32);
    tf.tidy(() => {
      const views = [0, 1, 2].map(() => randn(rng, 8, 6));
      const labels = [0, 1, 2, 0, 1, 3, 3, 0];
      const v = supconLoss(views, labelsOf(labels), { temperature: 0.1 }).dataSync()[0]!;
      close(v, referenceSupcon(views.map(rowsOf), labels, 0.1));
    });
  });

  it('depends on which samples share a label, not on the label values; is 0 when every label is the same', () => {
    const rng = new Rng(33);
    tf.tidy(() => {
      const views = [randn(rng, 6, 4), randn(rng, 6, 4)];
      const a = supconLoss(views, labelsOf([0, 0, 1, 1, 2, 2]), { temperature: 0.2 }).dataSync()[0]!;
      const b = supconLoss(views, labelsOf([-5, -5, 90, 90, 4, 4]), { temperature: 0.2 }).dataSync()[0]!;
      close(a, b);
      const same = supconLoss(views, labelsOf([3, 3, 3, 3, 3, 3]), { temperature: 0.2 }).dataSync()[0]!;
      assert.ok(Math.abs(same) < 1e-6, `${same}`);
    });
  });

  it('has correct gradients w.r.t. every view (finite differences)', () => {
    const rng = new Rng(34);
    const xs = [randn(rng, 5, 4), randn(rng, 5, 4), randn(rng, 5, 4)];
    const labels = labelsOf([0, 1, 0, 2, 1]);
    const f = (a: T2, b: T2, c: T2) => supconLoss([a, b, c], labels, { temperature: 0.2 });
    const { error, halvedError } = gradCheck(f, xs, rng);
    tf.dispose([...xs, labels]);
    assert.ok(error < 1e-2, `relative error ${error}`);
    assert.ok(halvedError > 0.3, `a halved gradient was not caught (${halvedError})`);
  });
});

describe('losses/dclLoss (DCL and DCLW)', () => {
  before(useCpuEngine);

  it('matches an independent float64 loop, DCL and DCLW', () => {
    const rng = new Rng(41);
    for (const sigma of [undefined, 0.5, 2]) {
      tf.tidy(() => {
        const [z1, z2] = [randn(rng, 7, 5), randn(rng, 7, 5)];
        const z2near = tf.add(z1, tf.mul(z2, 0.5)) as T2;
        const v = dclLoss(z1, z2near, { temperature: 0.1, sigma }).dataSync()[0]!;
        close(v, referenceDcl(rowsOf(z1), rowsOf(z2near), 0.1, sigma));
      });
    }
  });

  it('DCLW → DCL as σ → ∞ (every weight → 1), and DCLW = DCL when every positive pair is equally similar', () => {
    const rng = new Rng(42);
    tf.tidy(() => {
      const [z1, z2] = [randn(rng, 6, 4), randn(rng, 6, 4)];
      const dcl = dclLoss(z1, z2, { temperature: 0.1 }).dataSync()[0]!;
      close(dclLoss(z1, z2, { temperature: 0.1, sigma: 1e7 }).dataSync()[0]!, dcl);
      // z2 = 2·z1: s_ii = 1 for every i, the softmax is uniform and w = 2 − N/N = 1.
      const z1twice = tf.mul(z1, 2) as T2;
      close(dclLoss(z1, z1twice, { temperature: 0.1, sigma: 0.5 }).dataSync()[0]!, dclLoss(z1, z1twice, { temperature: 0.1 }).dataSync()[0]!);
    });
  });

  it('is below NT-Xent (the positive is left out of the denominator), by mean log(1 + e^{s_ii/τ − lse(negatives)})', () => {
    const rng = new Rng(43);
    tf.tidy(() => {
      const [z1, z2] = [randn(rng, 6, 4), randn(rng, 6, 4)];
      const t = 0.2;
      const dcl = dclLoss(z1, z2, { temperature: t }).dataSync()[0]!;
      const nt = ntXentLoss(z1, z2, { temperature: t }).dataSync()[0]!;
      assert.ok(dcl < nt, `${dcl} vs ${nt}`);
      const [a, b] = [normalize(rowsOf(z1)), normalize(rowsOf(z2))];
      let gap = 0;
      for (const [x, y] of [
        [a, b],
        [b, a],
      ] as const) {
        x.forEach((row, i) => {
          const negatives = x.flatMap((_, j) => (j === i ? [] : [dot(row, x[j]!) / t, dot(row, y[j]!) / t]));
          gap += Math.log1p(Math.exp(dot(row, y[i]!) / t - logSumExp(negatives)));
        });
      }
      close(nt - dcl, gap / (2 * a.length), 1e-4);
    });
  });

  it('has correct gradients: DCL by finite differences; DCLW against finite differences with its weights frozen', () => {
    const rng = new Rng(44);
    const t = 0.2;
    const xs = [randn(rng, 5, 4), randn(rng, 5, 4)];
    const dcl = gradCheck((a: T2, b: T2) => dclLoss(a, b, { temperature: t }), xs, rng);
    assert.ok(dcl.error < 1e-2, `DCL: relative error ${dcl.error}`);
    assert.ok(dcl.halvedError > 0.3, `DCL: a halved gradient was not caught (${dcl.halvedError})`);
    // DCLW's weights are detached (lightly: a constant tensor), so its gradient is that of the
    // loss with the weights frozen at their value: DCL(z) − (1/N) Σ_i (w_i − 1) s_ii(z)/τ
    // (both directions of the symmetric loss count s_ii/τ once each, averaged over 2N anchors).
    const sigma = 0.5;
    const n = 5;
    const [a0, b0] = xs.map((x) => rowsOf(x).map((row) => row.map((v) => v / Math.hypot(...row))));
    const sims = a0!.map((row, i) => row.reduce((s, v, k) => s + v * b0![i]![k]!, 0) / sigma);
    const m = Math.max(...sims);
    const total = sims.reduce((s, v) => s + Math.exp(v - m), 0);
    const w0 = sims.map((v) => 2 - (n * Math.exp(v - m)) / total);
    const frozen = (a: T2, b: T2) =>
      tf.tidy(() => {
        const sii = tf.sum(tf.mul(l2NormalizeRows(a), l2NormalizeRows(b)), 1);
        const extra = tf.div(tf.sum(tf.mul(tf.tensor1d(w0.map((w) => w - 1)), sii)), n * t);
        return tf.sub(dclLoss(a, b, { temperature: t }), extra) as tf.Scalar;
      });
    const dclw = (a: T2, b: T2) => dclLoss(a, b, { temperature: t, sigma });
    tf.tidy(() => close(dclw(xs[0]!, xs[1]!).dataSync()[0]!, frozen(xs[0]!, xs[1]!).dataSync()[0]!));
    const { grads } = tf.valueAndGrads((...a: tf.Tensor[]) => dclw(...(a as [T2, T2])))(xs);
    const flat = grads.map((g) => g.dataSync());
    const probe = fdProbe((...a: T2[]) => frozen(a[0]!, a[1]!), xs, grads, [0, 1], rng);
    const throughWeights = fdProbe((...a: T2[]) => dclw(a[0]!, a[1]!), xs, grads, [0, 1], rng);
    tf.dispose([...grads, ...xs]);
    const error = probeError(probe, flat);
    assert.ok(error < 1e-2, `DCLW: relative error ${error}`);
    assert.ok(
      probeError(
        probe,
        flat.map((g) => g.map((x) => x / 2)),
      ) > 0.3,
      'DCLW: a halved gradient was not caught',
    );
    // The weights do depend on z: differentiating through them would give another gradient.
    assert.ok(probeError(throughWeights, flat) > 0.05, 'DCLW: the frozen-weight gradient should differ from the full derivative');
  });
});

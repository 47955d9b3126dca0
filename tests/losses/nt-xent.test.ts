import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { batchLayout, MASKED_LOGIT, NT_XENT_DEFAULTS, ntXentLoss, ntXentMasks, type BatchLayout } from '../../src/losses/index.js';
import { gradCheck, randn, rowsOf, Rng, useCpuEngine } from './helpers.js';

/** An independent float64 NT-Xent in plain JS loops (rows [z1; z2], positive i <-> i+B). */
function referenceNtXent(z1: number[][], z2: number[][], t: number): number {
  const z = [...z1, ...z2].map((row) => {
    const n = Math.hypot(...row);
    return row.map((x) => x / n);
  });
  const m = z.length;
  const b = z1.length;
  let total = 0;
  for (let i = 0; i < m; i++) {
    const pos = i < b ? i + b : i - b;
    let denom = 0;
    let posLogit = 0;
    for (let j = 0; j < m; j++) {
      if (j === i) continue;
      const s = z[i].reduce((acc, x, k) => acc + x * z[j][k], 0) / t;
      denom += Math.exp(s);
      if (j === pos) posLogit = s;
    }
    total += Math.log(denom) - posLogit;
  }
  return total / m;
}

/** A group shape for the world-size guard (it throws before any collective is issued). */
function groupOfSize(worldSize: number, rank = 0): ProcessGroup {
  const g = new SingleProcessGroup();
  return Object.assign(Object.create(g) as ProcessGroup, { worldSize, rank });
}

describe('losses/ntXentLoss', () => {
  before(useCpuEngine);

  it('exports solo-learn’s default temperature 0.1', () => {
    assert.equal(NT_XENT_DEFAULTS.temperature, 0.1);
  });

  it('is 0 for B = 1 (the positive is the only candidate)', () => {
    const rng = new Rng(1);
    const v = tf.tidy(() => ntXentLoss(randn(rng, 1, 4), randn(rng, 1, 4), { temperature: 0.1 }).dataSync()[0]);
    assert.ok(Math.abs(v) < 1e-6, `${v}`);
  });

  it('matches the closed form for identical views of orthogonal embeddings', () => {
    // cos(positive) = 1, cos(each of the 2B - 2 negatives) = 0:
    // loss = -1/t + log(e^{1/t} + (2B - 2)).
    for (const [b, t] of [
      [3, 0.5],
      [4, 0.1],
    ] as const) {
      const expected = -1 / t + Math.log(Math.exp(1 / t) + (2 * b - 2));
      const v = tf.tidy(() => {
        const z = tf.mul(tf.eye(b, 6), 3) as tf.Tensor2D; // orthogonal rows, norm 3 (normalised inside)
        return ntXentLoss(z, z, { temperature: t }).dataSync()[0];
      });
      // float32: log(1 + ε) comes out of logsumexp − positive, so an absolute floor too
      assert.ok(Math.abs(v - expected) < 1e-6 + 1e-5 * Math.abs(expected), `B=${b} t=${t}: ${v} vs ${expected}`);
    }
  });

  it('matches an independent float64 loop implementation on random embeddings', () => {
    const rng = new Rng(7);
    for (const [b, d, t] of [
      [5, 3, 0.1],
      [8, 16, 0.2],
      [3, 7, 1.0],
    ] as const) {
      tf.tidy(() => {
        const z1 = randn(rng, b, d);
        const z2 = randn(rng, b, d, 2);
        const v = ntXentLoss(z1, z2, { temperature: t }).dataSync()[0];
        const ref = referenceNtXent(rowsOf(z1), rowsOf(z2), t);
        assert.ok(Math.abs(v - ref) < 1e-5 * Math.max(1, Math.abs(ref)), `B=${b} D=${d} t=${t}: ${v} vs ${ref}`);
      });
    }
  });

  it('has finite gradients when views coincide and τ is small (self column masked, not -inf)', () => {
    const rng = new Rng(3);
    tf.tidy(() => {
      const z = randn(rng, 4, 5);
      const grads = tf.grads((a: tf.Tensor, c: tf.Tensor) => ntXentLoss(a as tf.Tensor2D, c as tf.Tensor2D, { temperature: 0.01 }))([z, tf.clone(z)]);
      for (const g of grads) for (const x of g.dataSync()) assert.ok(Number.isFinite(x));
      assert.ok(MASKED_LOGIT < -1e8);
    });
  });

  it('passes a finite-difference gradient check for z1 and z2 (and rejects a halved gradient)', () => {
    const rng = new Rng(11);
    for (const t of [0.1, 0.5]) {
      const xs = [randn(rng, 4, 6), randn(rng, 4, 6)];
      const f = (a: tf.Tensor2D, c: tf.Tensor2D) => ntXentLoss(a, c, { temperature: t });
      const { error, halvedError } = gradCheck(f, xs, rng);
      tf.dispose(xs);
      assert.ok(error < 1e-2, `t=${t}: relative error ${error}`);
      assert.ok(halvedError > 0.3, `t=${t}: a halved gradient was not caught (${halvedError})`);
    }
  });

  it('puts self and positive columns at the rank offset (local anchors x global candidates)', () => {
    // Rank 1 of 2 with B = 2, N = 4: rows [z1_2, z1_3, z2_2, z2_3]; columns [Z1_0..3, Z2_0..3].
    const layout: BatchLayout = batchLayout('test', 2, groupOfSize(2, 1));
    assert.deepEqual(
      { rank: layout.rank, worldSize: layout.worldSize, localBatch: layout.localBatch, globalBatch: layout.globalBatch, offset: layout.offset },
      { rank: 1, worldSize: 2, localBatch: 2, globalBatch: 4, offset: 2 },
    );
    const { self, positive } = ntXentMasks(layout);
    const selfCols = (tf.cast(self, 'int32') as tf.Tensor2D).arraySync().map((r) => r.indexOf(1));
    const posCols = positive.arraySync().map((r) => r.indexOf(1));
    tf.dispose([self, positive]);
    assert.deepEqual(selfCols, [2, 3, 6, 7]);
    assert.deepEqual(posCols, [6, 7, 2, 3]);
  });

  // W > 1 (real processes): tests/distributed/losses.full.test.ts.
  it('accepts a one-process group (same value as no group)', () => {
    const rng = new Rng(5);
    tf.tidy(() => {
      const z1 = randn(rng, 3, 4);
      const z2 = randn(rng, 3, 4);
      const a = ntXentLoss(z1, z2, { temperature: 0.2 }).dataSync()[0];
      const b = ntXentLoss(z1, z2, { temperature: 0.2 }, new SingleProcessGroup()).dataSync()[0];
      assert.equal(a, b);
    });
  });

  it('rejects bad temperatures and mismatched shapes', () => {
    const rng = new Rng(6);
    tf.tidy(() => {
      const z1 = randn(rng, 3, 4);
      assert.throws(() => ntXentLoss(z1, z1, { temperature: 0 }), /temperature/);
      assert.throws(() => ntXentLoss(z1, randn(rng, 2, 4), { temperature: 0.1 }), /same shape/);
    });
  });
});

/**
 * Unit tests of the zoo losses with one positive per row: MoCo v2+ and ReSSL (a queue of
 * negatives), MoCo v3 and NNCLR (the global batch), SimSiam (negative cosine). Closed forms,
 * independent float64 loops, detached inputs, finite-difference gradients.
 */
import assert from 'node:assert/strict';
import { tf, type Tensor } from '../../src/core/tf.js';
import { mocoLoss, mocov3Loss, negativeCosineLoss, nnclrLoss, resslLoss } from '../../src/losses/index.js';
import { gradCheck, randn, rowsOf, Rng, useCpuEngine } from './helpers.js';
import { dot, logSoftmax, logSumExp, normalize } from './zoo-reference.js';

type T2 = tf.Tensor2D;

/** B orthogonal rows of norm 3 in D ≥ B dimensions (rows e_0 .. e_{B−1}). */
function orthogonal(b: number, d: number): T2 {
  return tf.mul(tf.eye(b, d), 3) as T2;
}

/** Rows e_first .. e_{first+k−1} of the identity in D dimensions: `[k, D]`. */
function basisRows(first: number, k: number, d: number): T2 {
  return tf.slice(tf.eye(d), [first, 0], [k, d]) as T2;
}

/** Gradients of `f` w.r.t. every input, as flat arrays. */
function gradsOf(f: (...xs: T2[]) => tf.Scalar, xs: T2[]): Float32Array[] {
  const { value, grads } = tf.valueAndGrads((...a: Tensor[]) => f(...(a as T2[])))(xs);
  const out = grads.map((g) => g.dataSync() as Float32Array);
  tf.dispose([value, ...grads]);
  return out;
}

function close(v: number, expected: number, rel = 1e-5, abs = 1e-6): void {
  assert.ok(Math.abs(v - expected) <= abs + rel * Math.abs(expected), `${v} vs ${expected}`);
}

function checkGradients(f: (...xs: T2[]) => tf.Scalar, xs: T2[], rng: Rng, which: number[]): void {
  const { error, halvedError } = gradCheck(f, xs, rng, which);
  assert.ok(error < 1e-2, `relative error ${error}`);
  assert.ok(halvedError > 0.3, `a halved gradient was not caught (${halvedError})`);
}

describe('losses/mocoLoss (MoCo v2+)', () => {
  before(useCpuEngine);

  it('matches the closed form when the key is the query and the queue is orthogonal to every query', () => {
    // logits [1/τ, 0, …, 0]: loss = −1/τ + log(e^{1/τ} + K)
    for (const [b, k, t] of [
      [3, 4, 0.2],
      [5, 1, 0.07],
    ] as const) {
      const v = tf.tidy(() => {
        const q = orthogonal(b, b + k);
        return mocoLoss(q, tf.mul(q, 0.5) as T2, basisRows(b, k, b + k), { temperature: t }).dataSync()[0]!;
      });
      close(v, -1 / t + Math.log(Math.exp(1 / t) + k));
    }
  });

  it('matches an independent float64 loop on random inputs (queue rows used as given)', () => {
    const rng = new Rng(11);
    tf.tidy(() => {
      const [q, k, queue] = [randn(rng, 6, 5), randn(rng, 6, 5), randn(rng, 4, 5, 0.7)];
      const t = 0.2;
      const v = mocoLoss(q, k, queue, { temperature: t }).dataSync()[0]!;
      const [qn, kn, qu] = [normalize(rowsOf(q)), normalize(rowsOf(k)), rowsOf(queue)];
      let ref = 0;
      qn.forEach((row, i) => (ref -= logSoftmax([dot(row, kn[i]!) / t, ...qu.map((u) => dot(row, u) / t)])[0]!));
      close(v, ref / 6);
    });
  });

  it('gives the key and the queue exactly zero gradient, the query a correct one', () => {
    const rng = new Rng(12);
    const xs = [randn(rng, 5, 6), randn(rng, 5, 6), tf.tidy(() => tf.div(randn(rng, 7, 6), 3) as T2)];
    const f = (q: T2, k: T2, queue: T2) => mocoLoss(q, k, queue, { temperature: 0.2 });
    const g = gradsOf(f, xs);
    assert.ok(g[1]!.every((x) => x === 0) && g[2]!.every((x) => x === 0));
    assert.ok(g[0]!.some((x) => x !== 0));
    checkGradients(f, xs, rng, [0]);
    tf.dispose(xs);
  });
});

describe('losses/mocov3Loss', () => {
  before(useCpuEngine);

  it('matches the closed form for identical orthogonal queries and keys: 2τ(−1/τ + log(e^{1/τ} + B − 1))', () => {
    for (const [b, t] of [
      [4, 0.2],
      [2, 1.0],
    ] as const) {
      const v = tf.tidy(() => mocov3Loss(orthogonal(b, 6), orthogonal(b, 6), { temperature: t }).dataSync()[0]!);
      close(v, 2 * t * (-1 / t + Math.log(Math.exp(1 / t) + b - 1)));
    }
  });

  it('matches an independent float64 loop on random inputs', () => {
    const rng = new Rng(13);
    tf.tidy(() => {
      const [q, k] = [randn(rng, 7, 4), randn(rng, 7, 4)];
      const t = 0.2;
      const [qn, kn] = [normalize(rowsOf(q)), normalize(rowsOf(k))];
      let ref = 0;
      qn.forEach((row, i) => (ref -= logSoftmax(kn.map((key) => dot(row, key) / t))[i]!));
      close(mocov3Loss(q, k, { temperature: t }).dataSync()[0]!, ((2 * t) / 7) * ref);
    });
  });

  it('gives the key exactly zero gradient (gathered without gradient), the query a correct one', () => {
    const rng = new Rng(14);
    const xs = [randn(rng, 5, 6), randn(rng, 5, 6)];
    const f = (q: T2, k: T2) => mocov3Loss(q, k, { temperature: 0.2 });
    assert.ok(gradsOf(f, xs)[1]!.every((x) => x === 0));
    checkGradients(f, xs, rng, [0]);
    tf.dispose(xs);
  });
});

describe('losses/negativeCosineLoss (SimSiam)', () => {
  before(useCpuEngine);

  it('is −1 for predictions along the targets and +1 for opposite ones', () => {
    const rng = new Rng(15);
    tf.tidy(() => {
      const z = randn(rng, 5, 4);
      close(negativeCosineLoss(tf.mul(z, 2.5) as T2, z).dataSync()[0]!, -1);
      close(negativeCosineLoss(tf.neg(z) as T2, z).dataSync()[0]!, 1);
    });
  });

  it('gives z exactly zero gradient, p a correct one', () => {
    const rng = new Rng(16);
    const xs = [randn(rng, 6, 5), randn(rng, 6, 5)];
    const f = (p: T2, z: T2) => negativeCosineLoss(p, z);
    const g = gradsOf(f, xs);
    assert.ok(g[1]!.every((x) => x === 0) && g[0]!.some((x) => x !== 0));
    checkGradients(f, xs, rng, [0]);
    tf.dispose(xs);
  });
});

describe('losses/nnclrLoss', () => {
  before(useCpuEngine);

  it('matches the closed form for identical orthogonal neighbours and predictions: −1/τ + log(e^{1/τ} + B − 1)', () => {
    const t = 0.2;
    const v = tf.tidy(() => nnclrLoss(orthogonal(4, 5), orthogonal(4, 5), { temperature: t }).dataSync()[0]!);
    close(v, -1 / t + Math.log(Math.exp(1 / t) + 3));
  });

  it('matches an independent float64 loop on random inputs', () => {
    const rng = new Rng(17);
    tf.tidy(() => {
      const [nn, p] = [randn(rng, 6, 4), randn(rng, 6, 4)];
      const t = 0.1;
      const [a, b] = [normalize(rowsOf(nn)), normalize(rowsOf(p))];
      let ref = 0;
      a.forEach((row, i) => (ref -= logSoftmax(b.map((x) => dot(row, x) / t))[i]!));
      close(nnclrLoss(nn, p, { temperature: t }).dataSync()[0]!, ref / 6);
    });
  });

  it('gives the neighbours exactly zero gradient, the predictions a correct one', () => {
    const rng = new Rng(18);
    const xs = [randn(rng, 5, 6), randn(rng, 5, 6)];
    const f = (nn: T2, p: T2) => nnclrLoss(nn, p, { temperature: 0.2 });
    assert.ok(gradsOf(f, xs)[0]!.every((x) => x === 0));
    checkGradients(f, xs, rng, [1]);
    tf.dispose(xs);
  });
});

describe('losses/resslLoss', () => {
  before(useCpuEngine);

  it('with τk → 0 is the cross-entropy of the query against the key’s nearest queue row', () => {
    const rng = new Rng(19);
    tf.tidy(() => {
      const [q, k, queue] = [randn(rng, 6, 5), randn(rng, 6, 5), randn(rng, 8, 5)];
      const tq = 0.1;
      const v = resslLoss(q, k, queue, { temperatureQ: tq, temperatureK: 1e-4 }).dataSync()[0]!;
      const [qn, kn, qu] = [normalize(rowsOf(q)), normalize(rowsOf(k)), rowsOf(queue)];
      let ref = 0;
      qn.forEach((row, i) => {
        const sims = qu.map((u) => dot(kn[i]!, u));
        const nearest = sims.indexOf(Math.max(...sims));
        ref -= logSoftmax(qu.map((u) => dot(row, u) / tq))[nearest]!;
      });
      close(v, ref / 6);
    });
  });

  it('with k = q and τk = τq is the mean entropy of the query’s distribution over the queue', () => {
    const rng = new Rng(20);
    tf.tidy(() => {
      const [q, queue] = [randn(rng, 5, 4), randn(rng, 9, 4)];
      const t = 0.3;
      const v = resslLoss(q, q, queue, { temperatureQ: t, temperatureK: t }).dataSync()[0]!;
      let ref = 0;
      for (const row of normalize(rowsOf(q))) {
        const logits = rowsOf(queue).map((u) => dot(row, u) / t);
        const lse = logSumExp(logits);
        ref -= logits.reduce((s, x) => s + Math.exp(x - lse) * (x - lse), 0);
      }
      close(v, ref / 5);
    });
  });

  it('gives k and the queue exactly zero gradient, q a correct one', () => {
    const rng = new Rng(21);
    const xs = [randn(rng, 5, 6), randn(rng, 5, 6), randn(rng, 7, 6)];
    const f = (q: T2, k: T2, queue: T2) => resslLoss(q, k, queue, { temperatureQ: 0.1, temperatureK: 0.04 });
    const g = gradsOf(f, xs);
    assert.ok(g[1]!.every((x) => x === 0) && g[2]!.every((x) => x === 0));
    checkGradients(f, xs, rng, [0]);
    tf.dispose(xs);
  });
});

/**
 * Unit tests of SwAV's Sinkhorn-Knopp and swapped-prediction loss and of the DINO loss with
 * its centre: properties and closed forms, independent float64 loops (solo-learn's Sinkhorn
 * with all its normalisations; the pair loops), invariances, constants with exactly zero
 * gradient, finite-difference gradients, and the input checks. The PyTorch references and the
 * W-rank runs are in cases.test.ts and tests/distributed/losses.full.test.ts.
 */
import assert from 'node:assert/strict';
import { UserError } from '../../src/core/errors.js';
import { recordJobSize } from '../../src/core/process-group.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { dinoLoss, sinkhornKnopp, swavLoss } from '../../src/losses/index.js';
import { gradCheck, randn, Rng, useCpuEngine } from './helpers.js';
import { logSoftmax } from './zoo-reference.js';

type T2 = tf.Tensor2D;

/** solo-learn's SinkhornKnopp in float64 loops, every normalisation as written there (rows: samples then queue). */
function referenceSinkhorn(scores: number[][], epsilon: number, iterations: number): number[][] {
  const m = scores.length;
  const k = scores[0]!.length;
  let q = scores.map((row) => row.map((s) => Math.exp(s / epsilon)));
  const total = q.flat().reduce((a, b) => a + b, 0);
  q = q.map((row) => row.map((v) => v / total));
  for (let it = 0; it < iterations; it++) {
    for (let c = 0; c < k; c++) {
      const sum = q.reduce((a, row) => a + row[c]!, 0);
      for (const row of q) row[c] = row[c]! / sum / k;
    }
    q = q.map((row) => {
      const sum = row.reduce((a, b) => a + b, 0);
      return row.map((v) => v / sum / m);
    });
  }
  return q.map((row) => row.map((v) => v * m));
}

function maxDiff(a: number[][], b: number[][]): number {
  return Math.max(...a.flatMap((row, i) => row.map((v, j) => Math.abs(v - b[i]![j]!))));
}

function expectUserError(fn: () => unknown, field: string): void {
  assert.throws(fn, (err: unknown) => err instanceof UserError && err.message.startsWith(`${field}: `), field);
}

describe('losses/sinkhornKnopp (SwAV)', () => {
  before(useCpuEngine);

  it('matches solo-learn’s algorithm (float64 loop) with and without queue rows, for 1 and 3 iterations', () => {
    const rng = new Rng(1);
    tf.tidy(() => {
      const scores = tf.tanh(randn(rng, 7, 5)) as T2;
      const queue = tf.tanh(randn(rng, 4, 5)) as T2;
      for (const iterations of [1, 3]) {
        const plain = sinkhornKnopp(scores, { epsilon: 0.05, iterations }).arraySync();
        assert.ok(maxDiff(plain, referenceSinkhorn(scores.arraySync(), 0.05, iterations)) < 1e-6);
        const withQueue = sinkhornKnopp(scores, { epsilon: 0.1, iterations, queueScores: queue }).arraySync();
        const ref = referenceSinkhorn([...scores.arraySync(), ...queue.arraySync()], 0.1, iterations).slice(0, 7);
        assert.ok(maxDiff(withQueue, ref) < 1e-6);
      }
    });
  });

  it('gives rows that sum to 1 and, with many iterations, equal prototype shares (each column sums to B/K)', () => {
    const rng = new Rng(2);
    tf.tidy(() => {
      const q = sinkhornKnopp(tf.tanh(randn(rng, 12, 4)) as T2, { epsilon: 0.5, iterations: 200 });
      for (const s of tf.sum(q, 1).arraySync() as number[]) assert.ok(Math.abs(s - 1) < 1e-6);
      for (const s of tf.sum(q, 0).arraySync() as number[]) assert.ok(Math.abs(s - 3) < 1e-4, `column sum ${s}`);
    });
  });

  it('is unchanged by a constant added to a prototype’s scores, permutes with the rows, and stays finite for a tiny epsilon', () => {
    const rng = new Rng(3);
    tf.tidy(() => {
      const scores = tf.tanh(randn(rng, 6, 5)) as T2;
      const options = { epsilon: 0.05, iterations: 3 };
      const q = sinkhornKnopp(scores, options).arraySync();
      const shifted = sinkhornKnopp(tf.add(scores, tf.tensor1d([3, -2, 0, 1, 5])) as T2, options).arraySync();
      assert.ok(maxDiff(q, shifted) < 1e-6);
      const order = [5, 0, 3, 1, 4, 2];
      const permuted = sinkhornKnopp(tf.gather(scores, order) as T2, options).arraySync();
      assert.ok(
        maxDiff(
          permuted,
          order.map((i) => q[i]!),
        ) < 1e-6,
      );
      // exp(score / ε) overflows float64 for ε = 1e-3 (scores up to 1): the maximum is subtracted first.
      const sharp = sinkhornKnopp(scores, { epsilon: 1e-3, iterations: 3 }).arraySync();
      for (const row of sharp) assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-6 && row.every(Number.isFinite));
    });
  });

  it('is a constant: the scores and the queue scores get exactly zero gradient', () => {
    const rng = new Rng(4);
    tf.tidy(() => {
      const [scores, queue] = [randn(rng, 5, 3), randn(rng, 2, 3)];
      const grads = tf.grads((s: Tensor, q: Tensor) => tf.sum(tf.square(sinkhornKnopp(s as T2, { epsilon: 0.1, iterations: 2, queueScores: q as T2 }))))([
        scores,
        queue,
      ]);
      for (const g of grads) assert.ok((g.dataSync() as Float32Array).every((v) => v === 0));
    });
  });

  it('refuses bad epsilon and iterations (UserErrors naming them), mismatched queue scores; keeps rows far below the maxima', () => {
    tf.tidy(() => {
      const scores = tf.zeros([3, 4]) as T2;
      for (const bad of [0, -1, NaN, Infinity]) expectUserError(() => sinkhornKnopp(scores, { epsilon: bad, iterations: 3 }), 'epsilon');
      for (const bad of [0, 1.5, -2, NaN]) expectUserError(() => sinkhornKnopp(scores, { epsilon: 0.05, iterations: bad }), 'iterations');
      assert.throws(
        () => sinkhornKnopp(scores, { epsilon: 0.05, iterations: 1, queueScores: tf.zeros([2, 5]) as T2 }),
        /queueScores \[2, 5\] must have K = 4 columns/,
      );
      assert.throws(() => sinkhornKnopp(tf.zeros([4]) as unknown as T2, { epsilon: 0.05, iterations: 1 }), /scores must be \[rows, K\]/);
      // Row 0 sits 1000 below every prototype's best score: exp(−1000 / 1) underflows to 0 (even
      // in float64), but the row normalisation is a log-sum-exp, so row 0 gets the exact [½, ½].
      const far = tf.tensor2d([
        [-1000, -1000],
        [0, 0],
      ]);
      assert.deepEqual(sinkhornKnopp(far, { epsilon: 1, iterations: 1 }).arraySync(), [
        [0.5, 0.5],
        [0.5, 0.5],
      ]);
      const infinite = sinkhornKnopp(tf.tensor2d([[Infinity, 0]]), { epsilon: 1, iterations: 1 }).arraySync();
      assert.ok(infinite[0]!.some(Number.isNaN), 'a score that is not finite gives NaN');
    });
  });
});

describe('losses/swavLoss', () => {
  before(useCpuEngine);

  it('is log K for uniform assignments and constant predictions', () => {
    tf.tidy(() => {
      const preds = [tf.zeros([3, 8]) as T2, tf.ones([3, 8]) as T2, tf.zeros([3, 8]) as T2];
      const a = tf.fill([3, 8], 1 / 8) as T2;
      const v = swavLoss(preds, [a, a], { temperature: 0.1 }).dataSync()[0]!;
      assert.ok(Math.abs(v - Math.log(8)) < 1e-6, `${v}`);
    });
  });

  it('matches a float64 loop over the pairs (g, v ≠ g) for 3 crops and 1 assignment, and for 4 crops and 2', () => {
    const rng = new Rng(5);
    tf.tidy(() => {
      for (const [crops, global] of [
        [3, 1],
        [4, 2],
      ] as const) {
        const preds = Array.from({ length: crops }, () => randn(rng, 4, 6));
        const assignments = Array.from({ length: global }, () => tf.softmax(randn(rng, 4, 6)) as T2);
        let total = 0;
        let pairs = 0;
        assignments.forEach((a, g) =>
          preds.forEach((p, v) => {
            if (v === g) return;
            const rows = p.arraySync().map((row, i) => -logSoftmax(row.map((x) => x / 0.2)).reduce((s, lp, k) => s + a.arraySync()[i]![k]! * lp, 0));
            total += rows.reduce((s, x) => s + x, 0) / rows.length;
            pairs++;
          }),
        );
        const v = swavLoss(preds, assignments, { temperature: 0.2 }).dataSync()[0]!;
        assert.ok(Math.abs(v - total / pairs) < 1e-5 * Math.abs(total / pairs), `${v} vs ${total / pairs}`);
      }
    });
  });

  it('gradients agree with finite differences; the assignments get exactly zero', () => {
    const rng = new Rng(6);
    const xs = [randn(rng, 4, 5), randn(rng, 4, 5), randn(rng, 4, 5), tf.softmax(randn(rng, 4, 5)) as T2, tf.softmax(randn(rng, 4, 5)) as T2];
    const f = (p0: T2, p1: T2, p2: T2, a0: T2, a1: T2) => swavLoss([p0, p1, p2], [a0, a1], { temperature: 0.5 });
    const { error, halvedError } = gradCheck(f as (...x: T2[]) => tf.Scalar, xs, rng, [0, 1, 2]);
    assert.ok(error < 1e-2 && halvedError > 0.3, `${error}, ${halvedError}`);
    const grads = tf.grads((...a: Tensor[]) => f(...(a as [T2, T2, T2, T2, T2])))(xs);
    for (const g of grads.slice(3)) assert.ok((g.dataSync() as Float32Array).every((v) => v === 0));
    tf.dispose([...xs, ...grads]);
  });

  it('refuses one crop, too many or no assignments, mismatched shapes and a bad temperature', () => {
    tf.tidy(() => {
      const p = tf.zeros([2, 3]) as T2;
      assert.throws(() => swavLoss([p], [p], { temperature: 0.1 }), /at least 2 crops/);
      assert.throws(() => swavLoss([p, p], [p, p, p], { temperature: 0.1 }), /needs 1 to 2 assignments/);
      assert.throws(() => swavLoss([p, p], [], { temperature: 0.1 }), /needs 1 to 2 assignments/);
      assert.throws(() => swavLoss([p, tf.zeros([2, 4]) as T2], [p], { temperature: 0.1 }), /same shape/);
      expectUserError(() => swavLoss([p, p], [p], { temperature: 0 }), 'temperature');
    });
  });
});

describe('losses/dinoLoss', () => {
  before(useCpuEngine);

  it('is log K for a uniform teacher and a constant student; the centre moves by (1 − m) towards the global teacher mean', () => {
    tf.tidy(() => {
      const student = [tf.zeros([2, 4]) as T2, tf.zeros([2, 4]) as T2, tf.ones([2, 4]) as T2];
      const teacher = [tf.fill([2, 4], 3) as T2, tf.fill([2, 4], 5) as T2];
      const centre = tf.tensor1d([1, 2, 3, 4]);
      const { loss, centre: next } = dinoLoss(student, teacher, centre, { studentTemperature: 0.1, teacherTemperature: 0.04, centreMomentum: 0.8 });
      assert.ok(Math.abs(loss.dataSync()[0]! - Math.log(4)) < 1e-6);
      // mean of the teacher rows = 4 in every column: 0.8 c + 0.2 · 4
      const expected = [1.6, 2.4, 3.2, 4];
      next.dataSync().forEach((v, i) => assert.ok(Math.abs(v - expected[i]!) < 1e-6, `${v} vs ${expected[i]}`));
      assert.deepEqual(Array.from(centre.dataSync()), [1, 2, 3, 4], 'the input centre is left as it was');
    });
  });

  it('matches a float64 loop (centred, sharpened teacher; pairs g ≠ v) and uses the OLD centre in the loss', () => {
    const rng = new Rng(7);
    tf.tidy(() => {
      const student = [randn(rng, 3, 5), randn(rng, 3, 5), randn(rng, 3, 5)];
      const teacher = [randn(rng, 3, 5), randn(rng, 3, 5)];
      const centre = tf.reshape(randn(rng, 1, 5), [5]) as tf.Tensor1D;
      const [ts, tt] = [0.1, 0.04];
      let total = 0;
      let pairs = 0;
      teacher.forEach((t, g) =>
        student.forEach((s, v) => {
          if (v === g) return;
          const rows = t.arraySync().map((row, i) => {
            const target = logSoftmax(row.map((x, k) => (x - centre.arraySync()[k]!) / tt)).map(Math.exp);
            return -logSoftmax(s.arraySync()[i]!.map((x) => x / ts)).reduce((acc, lp, k) => acc + target[k]! * lp, 0);
          });
          total += rows.reduce((a, b) => a + b, 0) / rows.length;
          pairs++;
        }),
      );
      const { loss } = dinoLoss(student, teacher, centre, { studentTemperature: ts, teacherTemperature: tt });
      assert.ok(Math.abs(loss.dataSync()[0]! - total / pairs) < 1e-5 * Math.abs(total / pairs));
    });
  });

  it('gradients agree with finite differences on the student; teacher and centre get exactly zero', () => {
    const rng = new Rng(8);
    const xs = [randn(rng, 3, 4), randn(rng, 3, 4), randn(rng, 3, 4), randn(rng, 3, 4), randn(rng, 1, 4)];
    // Teacher of crop 0 only: pairs (0, 1) and (0, 2), so student 0 is not used and not checked.
    const f = (s0: T2, s1: T2, s2: T2, t0: T2, c: T2) => {
      const { loss, centre } = dinoLoss([s0, s1, s2], [t0], tf.reshape(c, [4]) as tf.Tensor1D, { studentTemperature: 0.5, teacherTemperature: 0.3 });
      centre.dispose();
      return tf.add(loss, tf.mul(0, tf.sum(s0))) as tf.Scalar;
    };
    const { error, halvedError } = gradCheck(f as (...x: T2[]) => tf.Scalar, xs, rng, [1, 2]);
    assert.ok(error < 1e-2 && halvedError > 0.3, `${error}, ${halvedError}`);
    const grads = tf.grads((...a: Tensor[]) => f(...(a as [T2, T2, T2, T2, T2])))(xs);
    for (const g of grads.slice(3)) assert.ok((g.dataSync() as Float32Array).every((v) => v === 0));
    tf.dispose([...xs, ...grads]);
  });

  it('refuses a bad centre, momentum or temperature, wrong crop counts, and a multi-rank job without a group', () => {
    tf.tidy(() => {
      const s = tf.zeros([2, 3]) as T2;
      const c = tf.zeros([3]) as tf.Tensor1D;
      const options = { studentTemperature: 0.1, teacherTemperature: 0.04 };
      assert.throws(() => dinoLoss([s, s], [s], tf.zeros([4]) as tf.Tensor1D, options), /centre must be float32 \[3\]/);
      for (const bad of [-0.1, 1.5, NaN]) expectUserError(() => dinoLoss([s, s], [s], c, { ...options, centreMomentum: bad }), 'centreMomentum');
      expectUserError(() => dinoLoss([s, s], [s], c, { ...options, teacherTemperature: 0 }), 'teacherTemperature');
      expectUserError(() => dinoLoss([s, s], [s], c, { ...options, studentTemperature: -1 }), 'studentTemperature');
      assert.throws(() => dinoLoss([s], [s], c, options), /at least 2 crops/);
      assert.throws(() => dinoLoss([s, s], [s, s, s], c, options), /needs 1 to 2 teacher outputs/);
      recordJobSize(2);
      try {
        assert.throws(() => dinoLoss([s, s], [s], c, options), /without a process group in a 2-rank job/);
        assert.throws(() => sinkhornKnopp(s, { epsilon: 0.05, iterations: 1 }), /without a process group in a 2-rank job/);
      } finally {
        recordJobSize(1);
      }
    });
  });
});

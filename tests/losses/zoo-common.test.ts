/**
 * What every zoo loss shares: input validation (hyper-parameters named in the error, shapes,
 * dtypes), the refusal of a multi-rank job without a group, gatherConstantRows with one
 * process, and no leaked tensors.
 */
import assert from 'node:assert/strict';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { UserError } from '../../src/core/errors.js';
import { recordJobSize } from '../../src/core/process-group.js';
import {
  batchLayout,
  dclLoss,
  gatherConstantRows,
  mocoLoss,
  mocov3Loss,
  negativeCosineLoss,
  nnclrLoss,
  resslLoss,
  supconLoss,
} from '../../src/losses/index.js';
import { randn, Rng, useCpuEngine } from './helpers.js';

type T2 = tf.Tensor2D;

const labels4 = () => tf.tensor1d([0, 1, 0, 2], 'int32');

/** Every loss as a function of `[4, D]` inputs (and a `[5, D]` queue where it has one), with hyper-parameters `h`. */
const LOSSES: Array<[string, number, (xs: T2[], h: Record<string, number>) => Scalar]> = [
  ['mocoLoss', 3, ([q, k, queue], h) => mocoLoss(q!, k!, queue!, { temperature: h.temperature ?? 0.2 })],
  ['mocov3Loss', 2, ([q, k], h) => mocov3Loss(q!, k!, { temperature: h.temperature ?? 0.2 })],
  ['negativeCosineLoss', 2, ([p, z]) => negativeCosineLoss(p!, z!)],
  ['nnclrLoss', 2, ([nn, p], h) => nnclrLoss(nn!, p!, { temperature: h.temperature ?? 0.2 })],
  ['supconLoss', 2, ([a, b], h) => supconLoss([a!, b!], labels4(), { temperature: h.temperature ?? 0.1 })],
  ['resslLoss', 3, ([q, k, queue], h) => resslLoss(q!, k!, queue!, { temperatureQ: h.temperatureQ ?? 0.1, temperatureK: h.temperatureK ?? 0.04 })],
  ['dclLoss', 2, ([a, b], h) => dclLoss(a!, b!, { temperature: h.temperature ?? 0.1 })],
  ['dclLoss (DCLW)', 2, ([a, b], h) => dclLoss(a!, b!, { temperature: h.temperature ?? 0.1, sigma: h.sigma ?? 0.5 })],
];

function inputs(rng: Rng, arity: number, d = 6): T2[] {
  return Array.from({ length: arity }, (_, i) => randn(rng, i === 2 ? 5 : 4, d));
}

describe('zoo losses: shared behaviour', () => {
  before(useCpuEngine);

  describe('input validation', () => {
    for (const [name, arity, f] of LOSSES) {
      const fields = name.startsWith('resslLoss')
        ? ['temperatureQ', 'temperatureK']
        : name === 'dclLoss (DCLW)'
          ? ['temperature', 'sigma']
          : name === 'negativeCosineLoss'
            ? []
            : ['temperature'];
      for (const field of fields) {
        it(`${name}: ${field} 0, −1, NaN and ∞ are UserErrors naming ${field}`, () => {
          const rng = new Rng(1);
          const xs = inputs(rng, arity);
          for (const bad of [0, -1, NaN, Infinity]) {
            assert.throws(
              () => f(xs, { [field]: bad }),
              (err: unknown) => err instanceof UserError && err.message.startsWith(`${field}: `),
              `${field} = ${bad}`,
            );
          }
          tf.dispose(xs);
        });
      }
      it(`${name}: mismatched shapes, a non-matrix and int32 embeddings are refused`, () => {
        const rng = new Rng(2);
        tf.tidy(() => {
          const xs = inputs(rng, arity);
          const wrongD = [xs[0]!, randn(rng, 4, 5), ...xs.slice(2)];
          assert.throws(() => f(wrongD, {}), /must have the same shape/);
          const wrongB = [xs[0]!, randn(rng, 3, 6), ...xs.slice(2)];
          assert.throws(() => f(wrongB, {}), /must have the same shape|labels must be int32/);
          assert.throws(() => f([tf.ones([4]) as unknown as T2, ...xs.slice(1)], {}), /must be \[B, D\]/);
          assert.throws(() => f([tf.cast(xs[0]!, 'int32') as T2, ...xs.slice(1)], {}), /must be float32/);
        });
      });
    }

    it('mocoLoss and resslLoss: a queue of another D or not a matrix is refused', () => {
      const rng = new Rng(3);
      tf.tidy(() => {
        const [q, k] = [randn(rng, 4, 6), randn(rng, 4, 6)];
        for (const queue of [randn(rng, 5, 4), tf.ones([6]) as unknown as T2, tf.zeros([0, 6]) as T2]) {
          assert.throws(() => mocoLoss(q, k, queue, { temperature: 0.2 }), /mocoLoss: queue/);
          assert.throws(() => resslLoss(q, k, queue, { temperatureQ: 0.1, temperatureK: 0.04 }), /resslLoss: queue/);
        }
      });
    });

    it('supconLoss: one view, views of different shapes and labels of the wrong dtype or length are refused', () => {
      const rng = new Rng(4);
      tf.tidy(() => {
        const [a, b] = [randn(rng, 4, 6), randn(rng, 4, 6)];
        assert.throws(() => supconLoss([a], labels4(), { temperature: 0.1 }), /at least 2 views/);
        assert.throws(() => supconLoss([a, randn(rng, 4, 5)], labels4(), { temperature: 0.1 }), /same shape/);
        assert.throws(() => supconLoss([a, b], tf.tensor1d([0, 1, 0, 2]), { temperature: 0.1 }), /labels must be int32 \[4\]/);
        assert.throws(() => supconLoss([a, b], tf.tensor1d([0, 1, 0], 'int32'), { temperature: 0.1 }), /labels must be int32 \[4\]/);
      });
    });

    it('dclLoss: a global batch of one row is refused (no negatives)', () => {
      const rng = new Rng(5);
      tf.tidy(() => assert.throws(() => dclLoss(randn(rng, 1, 4), randn(rng, 1, 4), { temperature: 0.1 }), /at least 2 rows/));
    });
  });

  it('every loss refuses to run without a process group in a multi-rank job', () => {
    const rng = new Rng(6);
    const xs = inputs(rng, 3);
    recordJobSize(2);
    try {
      for (const [name, arity, f] of LOSSES) {
        assert.throws(() => f(xs.slice(0, arity), {}), /without a process group in a 2-rank job/, name);
      }
    } finally {
      recordJobSize(1);
      tf.dispose(xs);
    }
  });

  describe('gatherConstantRows (one process)', () => {
    it('returns the rows themselves, float32 [B, D] or int32 [B], with exactly zero gradient', () => {
      const layout = batchLayout('test', 3, undefined);
      tf.tidy(() => {
        const x = tf.tensor2d([1, 2, 3, 4, 5, 6], [3, 2]);
        assert.deepEqual(Array.from(gatherConstantRows(x, layout).dataSync()), [1, 2, 3, 4, 5, 6]);
        const g = tf.grad((t: Tensor) => tf.sum(tf.square(gatherConstantRows(t as T2, layout))))(x);
        assert.deepEqual(Array.from(g.dataSync()), [0, 0, 0, 0, 0, 0]);
        const labels = gatherConstantRows(tf.tensor1d([4, -1, 7], 'int32'), layout);
        assert.equal(labels.dtype, 'int32');
        assert.deepEqual(Array.from(labels.dataSync()), [4, -1, 7]);
      });
    });

    it('refuses other ranks and dtypes', () => {
      const layout = batchLayout('test', 3, undefined);
      tf.tidy(() => {
        assert.throws(() => gatherConstantRows(tf.tensor1d([1, 2, 3]), layout), /\[B, D\] float32 or \[B\] int32/);
        assert.throws(() => gatherConstantRows(tf.zeros([3, 2], 'int32'), layout), /\[B, D\] float32 or \[B\] int32/);
      });
    });
  });

  describe('no leaked tensors', () => {
    for (const [name, arity, f] of LOSSES) {
      it(`${name}: value + gradients leave tf.memory().numTensors unchanged`, () => {
        const rng = new Rng(7);
        const xs = inputs(rng, arity);
        const before = tf.memory().numTensors;
        for (let step = 0; step < 2; step++) {
          const { value, grads } = tf.valueAndGrads((...a: Tensor[]) => tf.tidy(() => f(a as T2[], {})))(xs);
          tf.dispose([value, ...grads]);
        }
        assert.equal(tf.memory().numTensors, before);
        tf.dispose(xs);
      });
    }
  });
});

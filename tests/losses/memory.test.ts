import assert from 'node:assert/strict';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { barlowTwinsLoss, barlowTwinsLossWithTerms, byolLoss, ntXentLoss, VICREG_DEFAULTS, vicregLoss, vicregLossWithTerms } from '../../src/losses/index.js';
import { checkLossCases, loadLossCases } from '../../src/verify/index.js';
import { CASES_FILE, EXAMPLE_CASE, randn, Rng, useCpuEngine } from './helpers.js';

describe('losses: no leaked tensors', () => {
  before(useCpuEngine);

  const cases: Array<[string, number, (...xs: tf.Tensor2D[]) => Scalar]> = [
    ['ntXentLoss', 2, (a, b) => ntXentLoss(a, b, { temperature: 0.1 })],
    ['barlowTwinsLoss', 2, (a, b) => barlowTwinsLoss(a, b, { lambd: 0.0051, scale: 0.1 })],
    ['byolLoss', 4, (a, b, c, d) => byolLoss(a, b, c, d)],
    ['vicregLoss', 2, (a, b) => vicregLoss(a, b, VICREG_DEFAULTS)],
  ];

  for (const [name, arity, f] of cases) {
    it(`${name}: value + gradients leave tf.memory().numTensors unchanged`, () => {
      const rng = new Rng(1);
      const xs = Array.from({ length: arity }, () => randn(rng, 6, 4));
      const before = tf.memory().numTensors;
      for (let step = 0; step < 3; step++) {
        const { value, grads } = tf.valueAndGrads((...a: Tensor[]) => f(...(a as tf.Tensor2D[])))(xs);
        tf.dispose([value, ...grads]);
        f(...xs).dispose();
      }
      assert.equal(tf.memory().numTensors, before);
      tf.dispose(xs);
    });
  }

  it('the *WithTerms variants and checkLossCases (every case) leave nothing behind', () => {
    const rng = new Rng(2);
    const [a, b] = [randn(rng, 5, 3), randn(rng, 5, 3)];
    const files = [loadLossCases(EXAMPLE_CASE), loadLossCases(CASES_FILE)];
    const before = tf.memory().numTensors;
    const t1 = barlowTwinsLossWithTerms(a, b, { lambd: 0.0051, scale: 0.1 });
    const t2 = vicregLossWithTerms(a, b, VICREG_DEFAULTS);
    assert.equal(tf.memory().numTensors, before + 7);
    tf.dispose([t1.loss, t1.onDiag, t1.offDiag, t2.loss, t2.invariance, t2.variance, t2.covariance]);
    for (const file of files) checkLossCases(file);
    assert.equal(tf.memory().numTensors, before);
    tf.dispose([a, b]);
  });
});

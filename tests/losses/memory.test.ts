import assert from 'node:assert/strict';
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { barlowTwinsLoss, barlowTwinsLossWithTerms, byolLoss, ntXentLoss, VICREG_DEFAULTS, vicregLoss, vicregLossWithTerms } from '../../src/losses/index.js';
import { checkLossCases, loadLossCases } from '../../src/verify/index.js';
import { vicreglLoss } from '../../src/losses/vicregl.js';
import { CASES_FILE, EXAMPLE_CASE, randn, Rng, useCpuEngine } from './helpers.js';
import { measure } from './nt-xent-measure.js';

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

describe('losses/vicreglLoss: memory', () => {
  before(useCpuEngine);

  it("value + gradients: peak tensor bytes (tf.profile) under 6 copies of the matched locations' [C, C] covariances (through autodiff: 36)", async () => {
    // 2 views, 4x4 maps, C = 256; both matchings keep 16 and 4 locations each way: 2 pairs x 40 matches x (x, y) = 160 covariances.
    const [b, l, c, d] = [8, 16, 256, 32];
    const rng = new Rng(3);
    const embeddings = [randn(rng, b, d), randn(rng, b, d)];
    const maps = [0, 1].map(() => tf.tensor3d(rng.normalArray(b * l * c, 0, 1), [b, l, c]));
    const locations = [0, 1].map(() => Float32Array.from(rng.normalArray(b * l * 2, 16, 8)));
    const covariancesBytes = 160 * c * c * 4; // 40 MiB
    const { peakAbove } = await measure(() => {
      const { value, grads } = tf.valueAndGrads(
        (...xs: Tensor[]) =>
          vicreglLoss(xs.slice(0, 2) as tf.Tensor2D[], xs.slice(2) as tf.Tensor3D[], { numMatches: [20, 4], l2AllMatches: false, locations }).loss,
      )([...embeddings, ...maps]);
      tf.dispose([value, ...grads]);
    });
    tf.dispose([...embeddings, ...maps]);
    const copies = peakAbove / covariancesBytes;
    assert.ok(copies >= 1 && copies < 6, `peak ${(peakAbove / 2 ** 20).toFixed(0)} MiB: ${copies.toFixed(1)} copies of the covariances`);
  });
});

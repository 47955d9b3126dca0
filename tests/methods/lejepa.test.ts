/**
 * LeJEPA on one process: its defaults (the reference's MINIMAL.md recipe), the SIGReg
 * directions (unit columns, keyed by the seed and the optimizer step), a step's loss and
 * logged parts as `lejepaLoss` gives them, and SIGReg against its closed form on a collapsed
 * batch. (Against PyTorch: tests/losses/cases.test.ts; W ranks and lightly #1920:
 * tests/distributed/losses.full.test.ts and zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { lejepaLoss } from '../../src/losses/index.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { LeJEPA } from '../../src/methods/lejepa.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

function build(args: MethodArgs = {}, seed = 3): LeJEPA {
  const cls = getMethodClass('lejepa');
  const m = new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'layer' }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('lejepa', { projHiddenDim: 8, projOutputDim: 4, numSlices: 6, ...args }),
    norm: 'layer',
  }) as LeJEPA;
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);

describe('LeJEPA', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults: MINIMAL.md's recipe (lamb 0.02, V = 4, proj_dim 16, lr 2e-3, wd 0.05), 256 directions, 17 points on [0, 3]", () => {
    const d = resolveMethodArgs('lejepa', {});
    assert.deepEqual(
      { hidden: d.projHiddenDim, out: d.projOutputDim, lambda: d.sigregWeight, slices: d.numSlices, tMax: d.tMax, knots: d.knots },
      { hidden: 2048, out: 16, lambda: 0.02, slices: 256, tMax: 3, knots: 17 },
    );
    assert.deepEqual(LeJEPA.optimDefaults, { optimizer: 'adamw', lr: 2e-3, classifierLr: 1e-3, weightDecay: 0.05 });
    assert.equal(LeJEPA.crops.globalCrops, 4);
  });

  it('directions: [K, S] unit columns, the same for the same seed and step, others at another step', () => {
    const [a, b] = [build({ projOutputDim: 5, numSlices: 7 }), build({ projOutputDim: 5, numSlices: 7 })];
    const p = a.projections(4);
    assert.deepEqual(p.shape, [5, 7]);
    const norms = tf.tidy(() => tf.norm(p, 2, 0).dataSync());
    norms.forEach((n) => assert.ok(Math.abs(n - 1) < 1e-6, `column norm ${n}`));
    const [same, other] = [b.projections(4), a.projections(5)];
    assert.deepEqual(same.dataSync(), p.dataSync());
    assert.notDeepEqual(other.dataSync(), p.dataSync());
    tf.dispose([p, same, other]);
    a.dispose();
    b.dispose();
  });

  it("a step's loss and logged parts are lejepaLoss of the projected views with the directions of the step's optimizer step", () => {
    const m = build();
    const rng = new Rng(1);
    const views: Tensor[] = [0, 1, 2, 3].map(() => tf.tensor4d(rng.normalArray(6 * 64), [6, 8, 8, 1]));
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    m.onTrainBatchStart({ step: 7, totalSteps: 10, epoch: 0 });
    const expected = tf.tidy(() => {
      const z = views.map((v) => m.projector.forward(m.backbone.forward(v)) as Tensor2D);
      const out = lejepaLoss(z, m.projections(7), { sigregWeight: 0.02, globalViews: 4, tMax: 3, knots: 17 });
      return [out.loss, out.prediction, out.sigreg].map((t) => t.dataSync()[0]!);
    });
    const out = m.trainingStep(views, labels);
    const got = ['loss', 'prediction', 'sigreg'].map((k) => out.metrics[k]!.dataSync()[0]!);
    got.forEach((v, i) => assert.ok(close(v, expected[i]!), `${['loss', 'prediction', 'sigreg'][i]}: ${v} vs ${expected[i]}`));
    assert.ok(close(got[0]!, 0.98 * got[1]! + 0.02 * got[2]!), 'loss = (1 - lambda) prediction + lambda sigreg');
    tf.dispose([out.loss, ...Object.values(out.metrics), ...views, labels]);
    m.dispose();
  });

  it('SIGReg: a collapsed batch gives N · Σ w_j (1 − φ(t_j))² (trapezoid weights × 2 × φ); Gaussian rows far less; the prediction term of equal views is 0', () => {
    const n = 64;
    const zero = tf.zeros([n, 3]) as Tensor2D;
    const dirs = tf.tensor2d([1, 0, 0, 1, 0, 0], [3, 2]);
    const collapsed = lejepaLoss([zero, zero], dirs, { sigregWeight: 1 });
    let expected = 0;
    for (let j = 0; j < 17; j++) {
      const t = (3 * j) / 16;
      const phi = Math.exp(-0.5 * t * t);
      expected += (j === 0 || j === 16 ? 3 / 16 : 6 / 16) * phi * (1 - phi) ** 2;
    }
    assert.ok(close(collapsed.sigreg.dataSync()[0]!, n * expected, 1e-5), `${collapsed.sigreg.dataSync()[0]} vs ${n * expected}`);
    assert.equal(collapsed.prediction.dataSync()[0], 0);
    const gaussian = tf.tensor2d(new Rng(2).normalArray(n * 3), [n, 3]);
    const spread = lejepaLoss([gaussian, gaussian], dirs, { sigregWeight: 1 });
    assert.ok(spread.sigreg.dataSync()[0]! < 0.1 * n * expected, `Gaussian rows: ${spread.sigreg.dataSync()[0]}`);
    tf.dispose([zero, dirs, gaussian, ...Object.values(collapsed), ...Object.values(spread)]);
  });
});

/**
 * SimDINO on one process: its defaults (the reference `MCRLoss`'s, DINO's small-image recipe
 * otherwise), the head (DINO's without the last layer), the state (student and EMA teacher, no
 * centre), a step's loss and logged parts as `simdinoLoss` gives them, and the coding rate
 * against its closed form. (Against PyTorch: tests/losses/cases.test.ts; W ranks:
 * tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { GELU, Linear } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { simdinoLoss } from '../../src/losses/index.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SimDINO } from '../../src/methods/simdino.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

function build(args: MethodArgs = {}, seed = 3): SimDINO {
  const cls = getMethodClass('simdino');
  const m = new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'layer' }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('simdino', { projHiddenDim: 8, projOutputDim: 4, ...args }),
    norm: 'layer',
  }) as SimDINO;
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

/** 2 global + 2 local crops (all 8 x 8: the mlp backbone takes one size) of 6 samples. */
function crops(seed: number): Tensor[] {
  const rng = new Rng(seed);
  return [0, 1, 2, 3].map(() => tf.tensor4d(rng.normalArray(6 * 64), [6, 8, 8, 1]));
}

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);

describe('SimDINO', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults: the reference MCRLoss's (eps 0.5, coeff 1), DINO's head without its last layer (2048-2048-256), DINO's small-image recipe", () => {
    const d = resolveMethodArgs('simdino', {});
    assert.deepEqual(
      { eps: d.eps, alignWeight: d.alignWeight, hidden: d.projHiddenDim, out: d.projOutputDim, bn: d.useBnInHead, tau: [d.baseTau, d.finalTau] },
      { eps: 0.5, alignWeight: 1, hidden: 2048, out: 256, bn: false, tau: [0.9995, 1] },
    );
    assert.deepEqual(SimDINO.optimDefaults, { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-6 });
    assert.equal(SimDINO.crops.globalCrops, 2);
  });

  it('head: Linear-GELU-Linear-GELU-Linear (std 0.02, zero biases) to K; state is the student and its EMA copy, no centre', () => {
    const m = build({ projHiddenDim: 64, projOutputDim: 32 });
    assert.deepEqual(
      m.head.namedChildren().map(([, l]) => (l instanceof Linear ? 'Linear' : l instanceof GELU ? 'GELU' : '?')),
      ['Linear', 'GELU', 'Linear', 'GELU', 'Linear'],
    );
    const values = m.head.parameters()[0]!.dataSync();
    const std = Math.sqrt(Array.from(values).reduce((s, v) => s + v * v, 0) / values.length);
    assert.ok(Math.abs(std - 0.02) < 0.002, `init std ${std}`);
    const x = tf.randomNormal([5, m.backbone.featureDim]);
    assert.deepEqual(m.head.forward(x).shape, [5, 32]);
    m.momentumHead.parameters().forEach((t, i) => assert.deepEqual(t.dataSync(), m.head.parameters()[i]!.dataSync()));
    const modules = new Set(Object.keys(m.stateDict()).map((k) => k.split('.')[0]));
    assert.deepEqual([...modules].sort(), ['backbone', 'classifier', 'head', 'momentumBackbone', 'momentumProjector']);
    x.dispose();
    m.dispose();
  });

  it("a step's loss and logged parts are simdinoLoss of the student on every crop and the teacher on the global crops; the teacher moves after the step", () => {
    const m = build({ baseTau: 0.5, finalTau: 0.5 });
    const views = crops(1);
    const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
    const expected = tf.tidy(() => {
      const student = views.map((v) => m.head.forward(m.backbone.forward(v)) as Tensor2D);
      const teacher = views.slice(0, 2).map((v) => m.momentumHead.forward(m.momentumBackbone.forward(v)) as Tensor2D);
      const out = simdinoLoss(student, teacher, { eps: 0.5, alignWeight: 1 });
      return [out.loss, out.alignment, out.codingRate].map((t) => t.dataSync()[0]!);
    });
    const out = m.trainingStep(views, labels);
    const got = ['loss', 'alignment', 'coding_rate'].map((k) => out.metrics[k]!.dataSync()[0]!);
    got.forEach((v, i) => assert.ok(close(v, expected[i]!), `${['loss', 'alignment', 'coding_rate'][i]}: ${v} vs ${expected[i]}`));
    assert.ok(close(got[0]!, -got[1]! - got[2]!), 'loss = -alignment - coding rate');
    const teacherBefore = m.momentumHead.parameters()[0]!.dataSync().slice();
    m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 });
    const student = m.head.parameters()[0]!.dataSync();
    m.momentumHead
      .parameters()[0]!
      .dataSync()
      .forEach((v, i) => assert.ok(Math.abs(v - (0.5 * teacherBefore[i]! + 0.5 * student[i]!)) < 1e-7));
    tf.dispose([out.loss, ...Object.values(out.metrics), ...views, labels]);
    m.dispose();
  });

  it('coding rate: its closed form on rows with ZᵀZ = 2I, and a collapsed batch has a smaller one', () => {
    // K = 2, N = 4 unit rows ±e1, ±e2: ZᵀZ = 2I, R = γ · ½ logdet((1 + K·2/(N ε)) I) = (K + N)/(K N) · log 3.
    const z = tf.tensor2d([1, 0, 0, 1, -1, 0, 0, -1], [4, 2]);
    const spread = simdinoLoss([z, z], [z], { eps: 0.5 });
    assert.ok(close(spread.codingRate.dataSync()[0]!, 0.75 * Math.log(3), 1e-6), `coding rate ${spread.codingRate.dataSync()[0]}`);
    const collapsed = tf.tensor2d([1, 0, 1, 0, 1, 0, 1, 0], [4, 2]);
    const low = simdinoLoss([collapsed, collapsed], [collapsed], { eps: 0.5 });
    // ZᵀZ = diag(4, 0): γ · ½ log(1 + 2·4/(4·0.5)) = 0.75 · ½ log 5 < 0.75 · log 3.
    assert.ok(close(low.codingRate.dataSync()[0]!, 0.375 * Math.log(5), 1e-6), `collapsed coding rate ${low.codingRate.dataSync()[0]}`);
    assert.equal(low.alignment.dataSync()[0], 1);
    tf.dispose([z, collapsed, spread.loss, spread.alignment, spread.codingRate, low.loss, low.alignment, low.codingRate]);
  });
});

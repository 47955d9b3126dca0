/**
 * DINO on one process: the head, the teacher temperature warm-up, the loss and centre as the
 * pure `dinoLoss` gives them (the centre carried from step to step), the last-layer freeze
 * and gradient clipping of `adjustGradients`, and the gradient cache. (W ranks and resuming:
 * tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { BatchNorm, GELU, Linear, type NormKind } from '../../src/core/layers.js';
import { l2NormalizeRows } from '../../src/core/ops.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor, type Tensor1D, type Tensor2D } from '../../src/core/tf.js';
import { dinoLoss } from '../../src/losses/dino.js';
import type { DINO } from '../../src/methods/dino.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { gradCacheGradients } from '../../src/methods/grad-cache.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';

const SMALL = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 6 };

function build(args: MethodArgs = {}, seed = 3, norm: NormKind = 'layer'): DINO {
  const cls = getMethodClass('dino');
  const m = new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm: 'layer' }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs('dino', { ...SMALL, ...args }),
    norm,
  }) as DINO;
  m.setup({ group: new SingleDeviceStrategy().group });
  return m;
}

/** 2 global + 2 local crops (all 8 x 8: the mlp backbone takes one size) of 6 samples. */
function crops(seed: number): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: [0, 1, 2, 3].map(() => tf.tensor4d(rng.normalArray(6 * 64), [6, 8, 8, 1])),
    labels: tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32'),
  };
}

function step(m: DINO, views: Tensor[], labels: Tensor): number {
  const out = m.trainingStep(views, labels);
  const value = out.metrics.loss.dataSync()[0]!;
  tf.dispose([out.loss, ...Object.values(out.metrics)]);
  return value;
}

const close = (a: number, b: number, rel = 1e-5) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-6);

describe('DINO', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('head: Linear-GELU-Linear-GELU-Linear (std 0.02, zero biases), L2-normalised, then the weight-normalised last layer', () => {
    const m = build({ projHiddenDim: 64, projOutputDim: 32 });
    const [w1] = m.head.mlp.parameters();
    const values = w1!.dataSync();
    const std = Math.sqrt(Array.from(values).reduce((s, v) => s + v * v, 0) / values.length);
    assert.ok(Math.abs(std - 0.02) < 0.002, `init std ${std}`);
    assert.ok(
      m.head.mlp
        .parameters()
        .filter((p) => p.rank === 1)
        .every((b) => b.dataSync().every((v) => v === 0)),
    );
    const x = tf.tensor2d(new Rng(4).normalArray(5 * m.backbone.featureDim), [5, m.backbone.featureDim]);
    const got = m.head.forward(x).arraySync() as number[][];
    const want = tf.tidy(() => tf.matMul(l2NormalizeRows(m.head.mlp.forward(x)), m.head.lastLayer.normalizedWeight()).arraySync() as number[][]);
    got.forEach((row, i) => row.forEach((v, k) => assert.ok(close(v, want[i]![k]!), `[${i}][${k}]`)));
    // The teacher starts as an exact copy of the student.
    m.momentumHead.parameters().forEach((t, i) => assert.deepEqual(t.dataSync(), m.head.parameters()[i]!.dataSync()));
    x.dispose();
    m.dispose();
  });

  it("useBnInHead true: student and teacher heads get a batch norm after each hidden Linear, so a shift common to the batch's features no longer reaches the output", () => {
    const kinds = (m: DINO) =>
      m.head.mlp.namedChildren().map(([, l]) => (l instanceof Linear ? 'Linear' : l instanceof BatchNorm ? 'BatchNorm' : l instanceof GELU ? 'GELU' : '?'));
    const plain = build({ projHiddenDim: 64, projOutputDim: 32 }, 3, 'batch');
    const withBn = build({ projHiddenDim: 64, projOutputDim: 32, useBnInHead: true }, 3, 'batch');
    assert.deepEqual(kinds(plain), ['Linear', 'GELU', 'Linear', 'GELU', 'Linear']);
    assert.deepEqual(kinds(withBn), ['Linear', 'BatchNorm', 'GELU', 'Linear', 'BatchNorm', 'GELU', 'Linear']);
    assert.deepEqual(
      withBn.momentumHead.mlp.namedChildren().map(([, l]) => l.constructor.name),
      withBn.head.mlp.namedChildren().map(([, l]) => l.constructor.name),
    );
    // Features with a large common part, as ReLU-pooled backbone features have.
    const f = withBn.backbone.featureDim;
    const x = tf.tensor2d(new Rng(5).normalArray(8 * f), [8, f]);
    const shifted = tf.add(x, tf.mul(tf.ones([1, f]), 50));
    const spread = (m: DINO) => tf.tidy(() => tf.max(tf.abs(tf.sub(m.head.forward(x), m.head.forward(shifted)))).dataSync()[0]!);
    const [withBnSpread, plainSpread] = [spread(withBn), spread(plain)];
    assert.ok(withBnSpread < 1e-4, `with batch norm the shift changed the output by ${withBnSpread}`);
    assert.ok(plainSpread > 1e-2, `without batch norm the shift changed the output by only ${plainSpread}`);
    tf.dispose([x, shifted]);
    plain.dispose();
    withBn.dispose();
  });

  it('teacher temperature: linear warm-up over warmupTeacherTemperatureEpochs (np.linspace per epoch), then constant', () => {
    const m = build({ warmupTeacherTemperatureEpochs: 4 });
    assert.deepEqual(
      [0, 1, 2, 3, 4, 9].map((e) => Number(m.teacherTemperature(e).toFixed(6))),
      [0.04, 0.05, 0.06, 0.07, 0.07, 0.07],
    );
    assert.equal(build().teacherTemperature(0), 0.07, 'solo-learn default: no warm-up');
    m.dispose();
  });

  it('its loss and centre are dinoLoss of the student on every crop and the teacher on the global crops; the centre moves after the step and carries over; the warm-up temperature is used', () => {
    const m = build({ warmupTeacherTemperatureEpochs: 3 });
    const { views, labels } = crops(1);
    let centre = tf.zeros([6]) as Tensor1D;
    for (const epoch of [0, 2]) {
      m.onTrainBatchStart({ step: epoch, totalSteps: 4, epoch });
      const expected = tf.tidy(() => {
        const student = views.map((v) => m.head.forward(m.backbone.forward(v)) as Tensor2D);
        const teacher = views.slice(0, 2).map((v) => m.momentumHead.forward(m.momentumBackbone.forward(v)) as Tensor2D);
        const out = dinoLoss(student, teacher, centre, { studentTemperature: 0.1, teacherTemperature: m.teacherTemperature(epoch), centreMomentum: 0.9 });
        return { loss: out.loss.dataSync()[0]!, centre: tf.keep(out.centre) };
      });
      const loss = step(m, views, labels);
      assert.ok(close(loss, expected.loss), `epoch ${epoch}: ${loss} vs ${expected.loss}`);
      assert.deepEqual(m.centre.dataSync(), centre.dataSync(), 'the loss leaves the centre alone: it moves after the optimizer step');
      m.onTrainBatchEnd({ step: epoch + 1, totalSteps: 4, epoch });
      const got = m.centre.dataSync();
      expected.centre.dataSync().forEach((v, k) => assert.ok(close(got[k]!, v), `centre[${k}]`));
      assert.ok(Math.max(...Array.from(got, Math.abs)) > 0, 'the centre moved');
      centre.dispose();
      centre = expected.centre;
    }
    // A wrong temperature gives another loss (the comparison above sees the schedule).
    const other = tf.tidy(() => {
      const student = views.map((v) => m.head.forward(m.backbone.forward(v)) as Tensor2D);
      const teacher = views.slice(0, 2).map((v) => m.momentumHead.forward(m.momentumBackbone.forward(v)) as Tensor2D);
      return dinoLoss(student, teacher, centre, { studentTemperature: 0.1, teacherTemperature: 0.04 }).loss.dataSync()[0]!;
    });
    const again = step(m, views, labels);
    assert.ok(!close(again, other, 1e-4), `${again} vs ${other}`);
    assert.deepEqual(
      Object.keys(m.stateDict()).filter((n) => n === 'centre'),
      ['centre'],
      'the centre is checkpointed',
    );
    tf.dispose([centre, ...views, labels]);
    m.dispose();
  });

  it("adjustGradients drops the last layer's gradient in the first freezeLastLayerEpochs epochs and clips each backbone gradient to clipGrad", () => {
    const m = build({ clipGrad: 0.5 });
    const grads: Record<string, Tensor> = Object.fromEntries(m.trainableParameters().map((v) => [v.name, tf.mul(tf.onesLike(v), 3)]));
    const frozen = m.adjustGradients(grads, { step: 0, totalSteps: 4, epoch: 0 });
    assert.ok(!(m.head.lastLayer.weight.name in frozen));
    const later = m.adjustGradients(grads, { step: 0, totalSteps: 4, epoch: 1 });
    assert.ok(m.head.lastLayer.weight.name in later);
    for (const v of m.trainableParameters()) {
      const g = later[v.name]!;
      const norm = tf.tidy(() => tf.norm(g).dataSync()[0]!);
      const inBackbone = m.backbone.parameters().includes(v);
      if (inBackbone) assert.ok(Math.abs(norm - 0.5) < 1e-5, `${v.name}: clipped to ${norm}`);
      else assert.equal(g, grads[v.name], `${v.name}: untouched`);
    }
    tf.dispose([...new Set([...Object.values(grads), ...Object.values(later), ...Object.values(frozen)])]);
    m.dispose();
  });

  it('the gradient cache (chunks of 2) gives the gradients and the centre of one pass', () => {
    const [a, b] = [build(), build()];
    const { views, labels } = crops(3);
    const whole = tf.variableGrads(() => {
      const out = a.trainingStep(views, labels);
      tf.dispose(Object.values(out.metrics));
      return out.loss;
    }, a.trainableParameters());
    const chunked = gradCacheGradients(b, views, labels, 2, b.trainableParameters());
    const names = new Map(b.trainableParameters().map((v, i) => [v.name, a.trainableParameters()[i]!.name]));
    let worst = 0;
    for (const [name, g] of Object.entries(chunked.grads)) {
      const x = g.dataSync();
      const y = whole.grads[names.get(name)!]!.dataSync();
      const scale = Math.max(...Array.from(y, Math.abs), 1e-6);
      for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs(x[i]! - y[i]!) / scale);
    }
    assert.ok(worst < 1e-4, `worst relative difference ${worst}`);
    for (const m of [a, b]) m.onTrainBatchEnd({ step: 1, totalSteps: 4, epoch: 0 });
    const [ca, cb] = [a.centre.dataSync(), b.centre.dataSync()];
    assert.ok(Math.max(...Array.from(ca, Math.abs)) > 0, 'the centre moved');
    ca.forEach((v, k) => assert.ok(close(cb[k]!, v), `centre[${k}]`));
    tf.dispose([...views, labels, ...Object.values(whole.grads), whole.value, ...Object.values(chunked.grads)]);
    a.dispose();
    b.dispose();
  });
});

/**
 * MoCo v2+, MoCo v3 and ReSSL on one process: defaults (solo-learn's CIFAR recipes), heads,
 * which parameters learn, what is detached, the queue written after the step with the
 * normalised keys, and the loss against a float64 hand computation from the embeddings.
 * (W ranks: tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import { BatchNorm, Linear, ReLU, type Sequential } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { MoCoV2Plus, MoCoV3, ReSSL, cosineTau, type MethodArgs, type MomentumMethod } from '../../src/methods/index.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';

const SMALL_ARGS: Record<string, Record<string, number>> = {
  mocov2plus: { projHiddenDim: 8, projOutputDim: 4, queueSize: 10, temperature: 0.3 },
  mocov3: { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8, temperature: 0.3 },
  ressl: { projHiddenDim: 8, projOutputDim: 4, queueSize: 10 },
};
const METHODS = ['mocov2plus', 'mocov3', 'ressl'];
const B = 6;

function build(name: string, seed = 3, extra: MethodArgs = {}): MomentumMethod {
  const cls = getMethodClass(name);
  return new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs(name, { ...SMALL_ARGS[name], ...extra }),
  }) as MomentumMethod;
}

function batch(seed: number): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: [0, 1].map(() => tf.tensor4d(rng.normalArray(B * 64), [B, 8, 8, 1])),
    labels: tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32'),
  };
}

type Rows = number[][];
const rows = (t: Tensor): Rows => t.arraySync() as Rows;
const normalize = (x: Rows): Rows =>
  x.map((r) => {
    const n = Math.max(Math.hypot(...r), 1e-12);
    return r.map((v) => v / n);
  });
const dot = (a: number[], b: number[]) => a.reduce((s, v, i) => s + v * b[i], 0);
const logSumExp = (x: number[]) => {
  const m = Math.max(...x);
  return m + Math.log(x.reduce((s, v) => s + Math.exp(v - m), 0));
};
/** Cross-entropy of the rows of `logits` against target columns. */
const meanCe = (logits: Rows, target: (i: number) => number) => logits.reduce((s, l, i) => s + logSumExp(l) - l[target(i)], 0) / logits.length;

/** solo-learn's mocov2plus_loss_func in float64. */
function mocoRef(q: Rows, k: Rows, queue: Rows, t: number): number {
  const [qn, kn] = [normalize(q), normalize(k)];
  return meanCe(
    qn.map((qi, i) => [dot(qi, kn[i]), ...queue.map((r) => dot(qi, r))].map((v) => v / t)),
    () => 0,
  );
}
/** solo-learn's mocov3_loss_func in float64 (one process). */
function mocov3Ref(q: Rows, k: Rows, t: number): number {
  const [qn, kn] = [normalize(q), normalize(k)];
  return (
    2 *
    t *
    meanCe(
      qn.map((qi) => kn.map((kj) => dot(qi, kj) / t)),
      (i) => i,
    )
  );
}
/** solo-learn's ressl_loss_func in float64. */
function resslRef(q: Rows, k: Rows, queue: Rows, tq: number, tk: number): number {
  const [qn, kn] = [normalize(q), normalize(k)];
  let total = 0;
  qn.forEach((qi, i) => {
    const lq = queue.map((r) => dot(qi, r) / tq);
    const lk = queue.map((r) => dot(kn[i], r) / tk);
    const [zq, zk] = [logSumExp(lq), logSumExp(lk)];
    total -= lk.reduce((s, v, j) => s + Math.exp(v - zk) * (lq[j] - zq), 0);
  });
  return total / qn.length;
}

function close(actual: number, expected: number, what: string, rel = 1e-5): void {
  assert.ok(Math.abs(actual - expected) <= rel * Math.max(1, Math.abs(expected)), `${what}: ${actual} vs ${expected}`);
}

function closeRows(actual: Rows, expected: Rows, what: string): void {
  assert.equal(actual.length, expected.length, what);
  actual.forEach((r, i) => r.forEach((v, j) => close(v, expected[i][j], `${what}[${i}][${j}]`)));
}

/** Features and embeddings of a batch, as the trainer's step computes them. */
function embedBatch(m: MomentumMethod, views: Tensor[]): Tensor[] {
  return m.embed(
    views.map((v) => m.features(v)),
    views,
  );
}

describe('MoCo v2+, MoCo v3, ReSSL', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("defaults are solo-learn's CIFAR recipes", () => {
    assert.deepEqual(resolveMethodArgs('mocov2plus', {}), {
      baseTau: 0.99,
      finalTau: 0.999,
      projHiddenDim: 2048,
      projOutputDim: 256,
      useBnInProjector: false,
      queueSize: 32768,
      temperature: 0.2,
    });
    assert.deepEqual(resolveMethodArgs('mocov3', {}), {
      baseTau: 0.99,
      finalTau: 1,
      projHiddenDim: 4096,
      projOutputDim: 256,
      predHiddenDim: 4096,
      temperature: 0.2,
    });
    assert.deepEqual(resolveMethodArgs('ressl', {}), {
      baseTau: 0.99,
      finalTau: 1,
      projHiddenDim: 4096,
      projOutputDim: 256,
      useBnInProjector: false,
      queueSize: 65536,
      temperatureQ: 0.1,
      temperatureK: 0.04,
    });
    assert.deepEqual(MoCoV2Plus.optimDefaults, { optimizer: 'sgd', lr: 0.3, classifierLr: 0.3, weightDecay: 1e-4 });
    assert.deepEqual(MoCoV3.optimDefaults, { optimizer: 'lars', lr: 0.3, classifierLr: 0.3, weightDecay: 1e-6 });
    assert.deepEqual(ReSSL.optimDefaults, { optimizer: 'sgd', lr: 0.05, classifierLr: 0.1, weightDecay: 1e-4 });
    assert.deepEqual([MoCoV2Plus.viewRecipe, MoCoV3.viewRecipe, ReSSL.viewRecipe], ['symmetric_weak', 'byol', 'ressl']);
    for (const name of METHODS) assert.match(getMethodClass(name).paper, /^.+ 20\d\d, ".+"$/);
  });

  it("heads: MoCo v2+ / ReSSL Linear-ReLU-Linear; MoCo v3 solo-learn's _build_mlp (no biases, last projector BN without affine)", () => {
    const kinds = (s: Sequential) =>
      s
        .namedChildren()
        .map(([, l]) =>
          l instanceof Linear ? `Linear${l.bias ? '+b' : ''}` : l instanceof BatchNorm ? `BN${l.weight ? '' : '-plain'}` : l instanceof ReLU ? 'ReLU' : '?',
        );
    for (const name of ['mocov2plus', 'ressl']) {
      const m = build(name) as MoCoV2Plus | ReSSL;
      assert.deepEqual(kinds(m.projector), ['Linear+b', 'ReLU', 'Linear+b']);
      assert.deepEqual(kinds(m.momentumProjector), ['Linear+b', 'ReLU', 'Linear+b']);
      m.dispose();
    }
    for (const name of ['mocov2plus', 'ressl']) {
      const m = build(name, 3, { useBnInProjector: true }) as MoCoV2Plus | ReSSL;
      assert.deepEqual(kinds(m.projector), ['Linear+b', 'BN', 'ReLU', 'Linear+b'], `${name} useBnInProjector true`);
      assert.deepEqual(kinds(m.momentumProjector), ['Linear+b', 'BN', 'ReLU', 'Linear+b'], `${name} useBnInProjector true`);
      m.dispose();
    }
    const m = build('mocov3') as MoCoV3;
    assert.deepEqual(kinds(m.projector), ['Linear', 'BN', 'ReLU', 'Linear', 'BN-plain']);
    assert.deepEqual(kinds(m.momentumProjector), ['Linear', 'BN', 'ReLU', 'Linear', 'BN-plain']);
    assert.deepEqual(kinds(m.predictor), ['Linear', 'BN', 'ReLU', 'Linear']);
    m.dispose();
  });

  it("useBnInProjector true (mocov2plus, ressl): a shift common to the batch's features no longer reaches the queries; without it, it does", () => {
    for (const name of ['mocov2plus', 'ressl']) {
      const plain = build(name, 3, { projHiddenDim: 64, projOutputDim: 32 }) as MoCoV2Plus | ReSSL;
      const withBn = build(name, 3, { projHiddenDim: 64, projOutputDim: 32, useBnInProjector: true }) as MoCoV2Plus | ReSSL;
      // Features with a large common part, as ReLU-pooled backbone features have.
      const f = withBn.backbone.featureDim;
      const x = tf.tensor2d(new Rng(5).normalArray(8 * f), [8, f]);
      const shifted = tf.add(x, tf.mul(tf.ones([1, f]), 50));
      const change = (m: MoCoV2Plus | ReSSL) => tf.tidy(() => tf.max(tf.abs(tf.sub(m.projector.forward(x), m.projector.forward(shifted)))).dataSync()[0]!);
      const [withBnChange, plainChange] = [change(withBn), change(plain)];
      assert.ok(withBnChange < 1e-4, `${name}: with batch norm the shift changed the queries by ${withBnChange}`);
      assert.ok(plainChange > 1e-2, `${name}: without batch norm the shift changed the queries by only ${plainChange}`);
      tf.dispose([x, shifted]);
      plain.dispose();
      withBn.dispose();
    }
  });

  for (const name of METHODS) {
    it(`${name}: one training step gives a finite loss and gradients for every online parameter; the targets are frozen copies`, () => {
      const m = build(name);
      const { views, labels } = batch(11);
      const trainable = m.trainableParameters();
      const named = m.namedParameters();
      const online = named.filter(([n]) => !n.startsWith('momentum'));
      assert.deepEqual(new Set(trainable), new Set(online.map(([, v]) => v)));
      for (const [n, v] of named.filter(([n]) => n.startsWith('momentum'))) {
        assert.equal(v.trainable, false, n);
        const source = m.stateDict()[n.replace(/^momentumBackbone/, 'backbone').replace(/^momentumProjector/, 'projector')];
        assert.deepEqual(v.dataSync(), source.dataSync(), `${n} starts as a copy`);
      }
      const { value, grads } = tf.variableGrads(() => {
        const out = m.trainingStep(views, labels);
        assert.ok(Number.isFinite(out.metrics.loss.dataSync()[0]));
        tf.dispose(Object.values(out.metrics));
        return out.loss;
      }, trainable);
      assert.ok(Number.isFinite(value.dataSync()[0]));
      for (const [n, v] of online) {
        const g = grads[v.name];
        assert.ok(g, `${n} has a gradient`);
        const norm = tf.norm(g).dataSync()[0];
        assert.ok(Number.isFinite(norm) && norm > 0, `${n}: gradient norm ${norm}`);
      }
      tf.dispose([value, ...Object.values(grads), ...views, labels]);
      m.dispose();
    });

    it(`${name}: no gradient reaches the keys (momentum outputs), the queries get one`, () => {
      const m = build(name);
      const { views, labels } = batch(12);
      const embeddings = embedBatch(m, views);
      const { value, grads } = tf.valueAndGrads((...inputs: Tensor[]) => m.coupledLoss(inputs, labels).loss)(embeddings);
      const half = embeddings.length / 2;
      grads.forEach((g, i) => {
        const maxAbs = tf.max(tf.abs(g)).dataSync()[0];
        if (i < half) assert.ok(maxAbs > 0, `query ${i} gets a gradient`);
        else assert.equal(maxAbs, 0, `key ${i - half} is detached`);
      });
      tf.dispose([value, ...grads, ...embeddings, ...views, labels]);
      m.dispose();
    });

    it(`${name}: the EMA moves the target projector too`, () => {
      const m = build(name) as MoCoV2Plus;
      const [online, target] = [m.projector.parameters()[0], m.momentumProjector.parameters()[0]];
      const before = Float32Array.from(target.dataSync());
      online.assign(tf.add(online, 1));
      const now = online.dataSync();
      m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
      const tau = cosineTau(m.args.baseTau, m.args.finalTau, 0, 10);
      target.dataSync().forEach((v, i) => close(v, tau * before[i] + (1 - tau) * now[i], `target[${i}]`));
      m.dispose();
    });
  }

  it('mocov2plus: loss = (moco(q1, k2, queue view 1) + moco(q2, k1, queue view 0)) / 2; both views of normalised keys queued after the step', () => {
    const m = build('mocov2plus') as MoCoV2Plus;
    const t = m.args.temperature;
    for (const seed of [21, 22]) {
      const { views, labels } = batch(seed);
      const [q1, q2, k1, k2] = embedBatch(m, views).map(rows);
      const [queue0, queue1] = [rows(m.queue.rows(0)), rows(m.queue.rows(1))];
      const embeddings = [q1, q2, k1, k2].map((r) => tf.tensor2d(r));
      const out = m.coupledLoss(embeddings, labels);
      close(out.loss.dataSync()[0], (mocoRef(q1, k2, queue1, t) + mocoRef(q2, k1, queue0, t)) / 2, 'loss');
      // The other pairing gives another value: the test tells the two apart.
      assert.ok(Math.abs(out.loss.dataSync()[0] - (mocoRef(q1, k2, queue0, t) + mocoRef(q2, k1, queue1, t)) / 2) > 1e-4);
      closeRows(rows(m.queue.rows(0)), queue0, 'nothing written before the step ends');
      const start = m.queue.position;
      m.onTrainBatchEnd({ step: seed - 20, totalSteps: 10, epoch: 0 });
      const slots = Array.from({ length: B }, (_, i) => (start + i) % 10);
      const [after0, after1] = [rows(m.queue.rows(0)), rows(m.queue.rows(1))];
      closeRows(
        slots.map((s) => after0[s]),
        normalize(k1),
        'view 0 holds the keys of view 1',
      );
      closeRows(
        slots.map((s) => after1[s]),
        normalize(k2),
        'view 1 holds the keys of view 2',
      );
      assert.equal(m.queue.position, (start + B) % 10);
      tf.dispose([...embeddings, ...views, labels, out.loss]);
    }
    assert.equal(m.queue.position, 2, 'the second step wrapped around');
    m.dispose();
  });

  it('mocov3: loss = mocov3(q1, k2) + mocov3(q2, k1) (2τ-scaled InfoNCE over the batch); no queue', () => {
    const m = build('mocov3') as MoCoV3;
    const { views, labels } = batch(23);
    const [q1, q2, k1, k2] = embedBatch(m, views).map(rows);
    const embeddings = [q1, q2, k1, k2].map((r) => tf.tensor2d(r));
    const out = m.coupledLoss(embeddings, labels);
    const t = m.args.temperature;
    close(out.loss.dataSync()[0], mocov3Ref(q1, k2, t) + mocov3Ref(q2, k1, t), 'loss');
    assert.deepEqual(m.queues(), []);
    tf.dispose([...embeddings, ...views, labels, out.loss]);
    m.dispose();
  });

  it('ressl: the student sees view 1 (strong), the teacher view 2 (weak); loss = ressl(q, k, queue); normalised k queued after the step', () => {
    const m = build('ressl') as ReSSL;
    const { views, labels } = batch(24);
    const [q, k] = embedBatch(m, views).map(rows);
    // The student's output depends on view 1 only, the teacher's on view 2 only.
    const other = batch(25).views;
    const [qOther, kSame] = embedBatch(m, [views[0], other[1]]).map(rows);
    closeRows(qOther, q, 'q ignores view 2');
    assert.notDeepEqual(kSame, k);
    const [, kOther] = embedBatch(m, [other[0], views[1]]).map(rows);
    closeRows(kOther, k, 'k ignores view 1');

    const queue = rows(m.queue.rows());
    const embeddings = [q, k].map((r) => tf.tensor2d(r));
    const out = m.coupledLoss(embeddings, labels);
    close(out.loss.dataSync()[0], resslRef(q, k, queue, m.args.temperatureQ, m.args.temperatureK), 'loss');
    m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
    closeRows(rows(m.queue.rows()).slice(0, B), normalize(k), 'queued teacher keys');
    closeRows(rows(m.queue.rows()).slice(B), queue.slice(B), 'other rows untouched');
    assert.equal(m.queue.position, B);
    tf.dispose([...embeddings, ...views, ...other, labels, out.loss]);
    m.dispose();
  });

  for (const name of METHODS) {
    it(`${name}: training steps do not grow the number of live tensors`, () => {
      const m = build(name);
      const counts: number[] = [];
      for (let step = 1; step <= 4; step++) {
        const { views, labels } = batch(30 + step);
        const { value, grads } = tf.variableGrads(() => {
          const out = m.trainingStep(views, labels);
          tf.dispose(Object.values(out.metrics));
          return out.loss;
        }, m.trainableParameters());
        tf.dispose([value, ...Object.values(grads), ...views, labels]);
        m.onTrainBatchEnd({ step, totalSteps: 4, epoch: 0 });
        counts.push(tf.memory().numTensors);
      }
      assert.ok(
        counts.every((c) => c === counts[0]),
        `live tensors per step: ${counts.join(', ')}`,
      );
      m.dispose();
    });
  }
});

/**
 * All4One on one process: its recipe, the position code, the support set's k nearest rows, the
 * loss as the weighted sum of its three terms on the right neighbours and views, where the
 * gradient goes (transformer and second predictor included, nothing into the target), the
 * momentum projections written after the step, and the per-sample embeddings the gradient cache
 * relies on. (With W ranks: tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { initEngine } from '../../src/core/engine.js';
import type { NormKind } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { all4oneCentroidLoss, all4oneFeatureLoss, nnclrLoss } from '../../src/losses/index.js';
import { All4One, FeatureQueue, sinusoidalPositions } from '../../src/methods/index.js';
import { getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';

const B = 6;
const P = 8;
const K = 12;
const LABELS = [0, 1, 2, 0, 1, 2];

function build(norm: NormKind = 'batch', extra: Record<string, number> = {}): All4One {
  const args = resolveMethodArgs('all4one', { projHiddenDim: 16, projOutputDim: P, predHiddenDim: 16, queueSize: K, transformerHeads: 2, ...extra });
  return new All4One({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm }),
    numClasses: 3,
    rng: new Rng(3),
    args,
    norm,
  });
}

function batch(seed: number): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return { views: [0, 1].map(() => tf.tensor4d(rng.normalArray(B * 64), [B, 8, 8, 1])), labels: tf.tensor1d(LABELS, 'int32') };
}

function rowsOf(t: Tensor): number[][] {
  return t.arraySync() as number[][];
}

function close(a: number[][], b: number[][], tol = 1e-5): void {
  a.forEach((row, i) => row.forEach((x, j) => assert.ok(Math.abs(x - b[i]![j]!) <= tol, `[${i}][${j}]: ${x} vs ${b[i]![j]}`)));
}

/** Slots of the `k` rows of `bank` with the largest inner product with `q`, by brute force. */
function bruteTopK(bank: number[][], q: number[], k: number): number[] {
  const scores = bank.map((r, i) => [r.reduce((s, x, j) => s + x * q[j]!, 0), i] as const);
  return [...scores]
    .sort((a, b) => b[0] - a[0])
    .slice(0, k)
    .map(([, i]) => i);
}

/** Fills the support set with random rows so that it holds more than its initial draws. */
function fillQueue(queue: FeatureQueue, rng: Rng): void {
  const rows = tf.tensor2d(rng.normalArray(K * P), [K, P]);
  queue.push(
    [tf.div(rows, tf.norm(rows, 2, 1, true))],
    tf.tensor1d(
      Array.from({ length: K }, (_, i) => i % 3),
      'int32',
    ),
  );
  queue.flush();
}

describe('All4One', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("is registered and defaults to solo-learn's CIFAR recipe", () => {
    assert.ok(methodNames().includes('all4one'));
    const cls = getMethodClass('all4one');
    assert.deepEqual(resolveMethodArgs('all4one', {}), {
      baseTau: 0.99,
      finalTau: 1,
      projHiddenDim: 2048,
      projOutputDim: 256,
      predHiddenDim: 4096,
      temperature: 0.2,
      centroidTemperature: 0.1,
      neighbours: 5,
      transformerLayers: 3,
      transformerHeads: 8,
      nnclrWeight: 0.5,
      centroidWeight: 0.5,
      featureWeight: 0.5,
      queueSize: 65536,
    });
    assert.deepEqual(cls.optimDefaults, { optimizer: 'lars', lr: 1.0, classifierLr: 0.1, weightDecay: 1e-5 });
    assert.equal(cls.viewRecipe, 'byol');
    assert.match(cls.paper, /^Estepa et al\. 2023, "All4One/);
  });

  it('refuses a projection width the heads do not divide, naming both fields', () => {
    assert.throws(() => build('batch', { transformerHeads: 3 }), /method_args\.projOutputDim \(8\) must be divisible by method_args\.transformerHeads \(3\)/);
    assert.throws(() => build('batch', { neighbours: K + 1 }), /method_args\.neighbours \(13\) must be at most method_args\.queueSize \(12\)/);
  });

  it("adds solo-learn's Summer(PositionalEncodingPermute1D(5)): token c, feature d gets sin/cos(d · 10000^(-2⌊c/2⌋/6))", () => {
    const pe = rowsOf(sinusoidalPositions(5, 4));
    const f = [1, 10000 ** (-2 / 6), 10000 ** (-4 / 6)];
    const expected = [0, 1, 2, 3, 4].map((c) => [0, 1, 2, 3].map((d) => (c % 2 === 0 ? Math.sin(d * f[c >> 1]!) : Math.cos(d * f[c >> 1]!))));
    close(pe, expected, 1e-6);
  });

  it('FeatureQueue.nearestK: the k rows of largest inner product, nearest first (the first is nearest()), constants', () => {
    const rng = new Rng(8);
    const queue = new FeatureQueue(K, P, { labels: false, rng });
    const z = tf.tensor2d(rng.normalArray(B * P), [B, P]);
    const { index, rows } = queue.nearestK(z, 5);
    const bank = rowsOf(queue.rows());
    const expected = rowsOf(z).map((q) => bruteTopK(bank, q, 5));
    assert.deepEqual(index.arraySync(), expected);
    close(
      (rows.arraySync() as number[][][]).flat(),
      expected.flat().map((i) => bank[i]!),
      0,
    );
    assert.deepEqual(
      Array.from(queue.nearest(z).index.dataSync()),
      expected.map((e) => e[0]),
    );
    const grad = tf.grad((x: Tensor) => tf.sum(queue.nearestK(x as Tensor2D, 3).rows))(z);
    assert.ok(
      grad.dataSync().every((g) => g === 0),
      'no gradient through the lookup',
    );
    assert.throws(() => queue.nearestK(z, K + 1), /k must be an integer in \[1, 12\]/);
    queue.dispose();
  });

  it("the loss is ½ nnclr + ½ centroid + ½ feature on the support set's nearest rows, views paired crosswise", () => {
    const m = build();
    const rng = new Rng(5);
    fillQueue(m.queue, rng);
    const { views, labels } = batch(7);
    const embeddings = m.embed(
      views.map((v) => m.features(v)),
      views,
    ) as Tensor2D[];
    assert.equal(embeddings.length, 10);
    const [p1, p2, z1, z2, m1, m2, c1, c2, s1, s2] = embeddings as [
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
      Tensor2D,
    ];
    const bank = rowsOf(m.queue.rows());
    const nn = (mv: Tensor2D) => tf.tensor2d(rowsOf(mv).map((q) => bank[bruteTopK(bank, q, 1)[0]!]!));
    const t = { temperature: 0.2 };
    const ct = { temperature: 0.1 };
    const terms = (cA: Tensor2D, cB: Tensor2D) => {
      const nnclr = (nnclrLoss(nn(m1), p2, t).dataSync()[0]! + nnclrLoss(nn(m2), p1, t).dataSync()[0]!) / 2;
      const centroid = (all4oneCentroidLoss(cA, s2, ct).dataSync()[0]! + all4oneCentroidLoss(cB, s1, ct).dataSync()[0]!) / 2;
      return { nnclr, centroid, feature: all4oneFeatureLoss(m1, m2, z1, z2).dataSync()[0]! };
    };
    const out = m.coupledLoss(embeddings, labels);
    const expected = terms(c1, c2);
    const got = (name: string) => out.terms![name]!.dataSync()[0]!;
    assert.ok(Math.abs(got('nnclr_loss') - expected.nnclr) < 1e-5);
    assert.ok(Math.abs(got('centroid_loss') - expected.centroid) < 1e-5);
    assert.ok(Math.abs(got('feature_loss') - expected.feature) < 1e-5);
    assert.ok(Math.abs(out.loss.dataSync()[0]! - 0.5 * (expected.nnclr + expected.centroid + expected.feature)) < 1e-5);
    assert.ok(Math.abs(terms(c2, c1).centroid - expected.centroid) > 1e-3, 'the check tells the views apart');
    assert.ok(Number.isFinite(got('nn_acc')));
    // Every row of m_v is normalised (solo-learn's momentum_forward).
    for (const r of rowsOf(m1)) assert.ok(Math.abs(Math.hypot(...r) - 1) < 1e-5);
    m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
    m.dispose();
  });

  it('one training step gives finite gradients to every trainable part, transformer and second predictor included, none to the target', () => {
    const m = build();
    const { views, labels } = batch(9);
    const trainable = m.trainableParameters();
    const frozen = new Set([...m.momentumBackbone.parameters(), ...m.momentumProjector.parameters()]);
    assert.ok(frozen.size > 0 && trainable.every((v) => !frozen.has(v)), 'the EMA target is not trained');
    const { value, grads } = tf.variableGrads(() => {
      const out = m.trainingStep(views, labels);
      tf.dispose(Object.values(out.metrics));
      return out.loss;
    }, trainable);
    assert.ok(Number.isFinite(value.dataSync()[0]!));
    for (const g of Object.values(grads)) assert.ok(g.dataSync().every(Number.isFinite));
    for (const head of ['backbone', 'projector', 'predictor', 'predictor2', 'transformer']) {
      const norm = m
        .namedParameters()
        .filter(([n]) => n.startsWith(`${head}.`))
        .reduce((s, [, v]) => s + tf.norm(grads[v.name]!).dataSync()[0]!, 0);
      assert.ok(norm > 0, `${head} gets a gradient`);
    }
    m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
    m.dispose();
  });

  it("the step's normalised view-1 momentum projections and labels are written after onTrainBatchEnd", () => {
    const m = build();
    const before = rowsOf(m.queue.rows());
    const { views, labels } = batch(10);
    const embeddings = m.embed(
      views.map((v) => m.features(v)),
      views,
    );
    m.coupledLoss(embeddings, labels);
    assert.deepEqual(rowsOf(m.queue.rows()), before, 'nothing written during the step');
    m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
    const after = rowsOf(m.queue.rows());
    close(after.slice(0, B), rowsOf(embeddings[4]!));
    assert.deepEqual(after.slice(B), before.slice(B));
    assert.deepEqual(Array.from(m.queue.labels().dataSync()), [...LABELS, ...Array<number>(K - B).fill(-1)]);
    m.dispose();
  });

  it('embeddings depend on their own sample only (the gradient cache contract), transformer included', () => {
    const m = build('layer');
    fillQueue(m.queue, new Rng(2));
    const { views } = batch(11);
    const whole = m.embed(
      views.map((v) => m.features(v)),
      views,
    );
    const halves = [0, 3].map((start) => {
      const part = views.map((v) => tf.slice(v, start, 3));
      return m.embed(
        part.map((v) => m.features(v)),
        part,
      );
    });
    whole.forEach((e, i) => close(rowsOf(e), [...rowsOf(halves[0]![i]!), ...rowsOf(halves[1]![i]!)]));
    m.dispose();
  });

  it('all4oneCentroidLoss: gradient reaches both the centroids and the candidates (nnclrLoss treats its neighbours as constants)', () => {
    const rng = new Rng(4);
    const [a, b] = [0, 1].map(() => tf.tensor2d(rng.normalArray(B * P), [B, P]));
    const [ga, gb] = tf.grads((x: Tensor, y: Tensor) => all4oneCentroidLoss(x as Tensor2D, y as Tensor2D, { temperature: 0.1 }))([a!, b!]);
    assert.ok(tf.norm(ga!).dataSync()[0]! > 0 && tf.norm(gb!).dataSync()[0]! > 0);
    const [na] = tf.grads((x: Tensor, y: Tensor) => nnclrLoss(x as Tensor2D, y as Tensor2D, { temperature: 0.1 }))([a!, b!]);
    assert.ok(na!.dataSync().every((g) => g === 0));
    const value = (all4oneCentroidLoss(a!, b!, { temperature: 0.1 }) as Scalar).dataSync()[0]!;
    assert.ok(Math.abs(value - nnclrLoss(a!, b!, { temperature: 0.1 }).dataSync()[0]!) < 1e-6, 'same value as the NNCLR loss');
  });
});

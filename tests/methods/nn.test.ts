/**
 * SimSiam and the nearest-neighbour methods (NNCLR, NNBYOL, NNSiam) on one process: their
 * recipes, one training step, where the gradient goes (nothing into the targets or the
 * neighbours), the neighbours being the support set's nearest rows, the rows written after
 * the step, `nn_acc`, SimSiam's static predictor lr and the gradient cache. (With W ranks:
 * tests/distributed/zoo-exactness.full.test.ts.)
 */
import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import type { NormKind } from '../../src/core/layers.js';
import { initEngine } from '../../src/core/engine.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../../src/core/tf.js';
import { byolLoss, negativeCosineLoss, nnclrLoss } from '../../src/losses/index.js';
import { gradCacheGradients } from '../../src/methods/grad-cache.js';
import { BatchNorm, Linear } from '../../src/core/layers.js';
import { FeatureQueue, MomentumMethod, nearestNeighbours, NNBYOL, NNCLR, SimSiam, type BaseMethod } from '../../src/methods/index.js';
import { getMethodClass, resolveMethodArgs } from '../../src/methods/registry.js';
import { SslTask } from '../../src/methods/task.js';
import type { Optimizer } from '../../src/optim/index.js';

const METHODS = ['simsiam', 'nnclr', 'nnbyol', 'nnsiam'] as const;
const NN_METHODS = ['nnclr', 'nnbyol', 'nnsiam'] as const;
const B = 6;
const D = 4;
const K = 10;

function build(name: string, norm: NormKind = 'batch', seed = 3): BaseMethod {
  const small: Record<string, number> = { projHiddenDim: 8, projOutputDim: D, predHiddenDim: 8 };
  if (name !== 'simsiam') small.queueSize = K;
  return new (getMethodClass(name))({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16], norm }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs(name, small),
    norm,
  });
}

function batch(seed: number): { views: Tensor[]; labels: Tensor } {
  const rng = new Rng(seed);
  return {
    views: [0, 1].map(() => tf.tensor4d(rng.normalArray(B * 64), [B, 8, 8, 1])),
    labels: tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32'),
  };
}

function randomRows(rng: Rng, n = B): Tensor2D {
  return tf.tensor2d(rng.normalArray(n * D), [n, D]);
}

function queueOf(m: BaseMethod): FeatureQueue {
  return (m as NNCLR).queue;
}

function rowsOf(t: Tensor): number[][] {
  return t.arraySync() as number[][];
}

function normalized(t: Tensor): number[][] {
  return rowsOf(t).map((r) => r.map((x) => x / Math.hypot(...r)));
}

/** The support-set row with the largest inner product with each normalised row of `z`, by brute force. */
function bruteNearest(queue: FeatureQueue, z: Tensor): { index: number[]; rows: Tensor2D } {
  const bank = rowsOf(queue.rows());
  const index = normalized(z).map((q) => {
    const scores = bank.map((r) => r.reduce((s, x, j) => s + x * q[j], 0));
    return scores.indexOf(Math.max(...scores));
  });
  return { index, rows: tf.tensor2d(index.map((i) => bank[i])) };
}

function close(a: number[][], b: number[][], tol = 1e-6): void {
  a.forEach((row, i) => row.forEach((x, j) => assert.ok(Math.abs(x - b[i][j]) < tol, `[${i}][${j}]: ${x} vs ${b[i][j]}`)));
}

/** The method's loss on given embeddings and that loss with the two views' neighbours swapped. */
function expectedLoss(name: string, m: BaseMethod, [p1, p2, z1, z2]: Tensor2D[]): { right: number; swapped: number } {
  const nn1 = bruteNearest(queueOf(m), z1).rows;
  const nn2 = bruteNearest(queueOf(m), z2).rows;
  const loss = (a: Tensor2D, b: Tensor2D): Scalar => {
    if (name === 'nnclr') return tf.div(tf.add(nnclrLoss(a, p2, { temperature: 0.2 }), nnclrLoss(b, p1, { temperature: 0.2 })), 2) as Scalar;
    if (name === 'nnbyol') return byolLoss(p1, p2, a, b);
    return tf.div(tf.add(negativeCosineLoss(p1, b), negativeCosineLoss(p2, a)), 2) as Scalar;
  };
  return { right: loss(nn1, nn2).dataSync()[0], swapped: loss(nn2, nn1).dataSync()[0] };
}

describe('SimSiam, NNCLR, NNBYOL, NNSiam', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it("default to solo-learn's CIFAR recipes", () => {
    const recipe = (name: string) => {
      const cls = getMethodClass(name);
      return { args: resolveMethodArgs(name, {}), optim: cls.optimDefaults, views: cls.viewRecipe, paper: cls.paper };
    };
    const simsiam = recipe('simsiam');
    assert.deepEqual(simsiam.args, { projHiddenDim: 2048, projOutputDim: 2048, predHiddenDim: 512 });
    assert.deepEqual(simsiam.optim, { optimizer: 'sgd', lr: 0.5, classifierLr: 0.1, weightDecay: 1e-5 });
    assert.equal(simsiam.views, 'symmetric_weak');
    const nnclr = recipe('nnclr');
    assert.deepEqual(nnclr.args, { projHiddenDim: 2048, projOutputDim: 256, predHiddenDim: 4096, temperature: 0.2, queueSize: 65536 });
    assert.deepEqual(nnclr.optim, { optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-5 });
    const nnbyol = recipe('nnbyol');
    assert.deepEqual(nnbyol.args, { baseTau: 0.99, finalTau: 1, projHiddenDim: 4096, projOutputDim: 256, predHiddenDim: 4096, queueSize: 65536 });
    assert.deepEqual(nnbyol.optim, { optimizer: 'lars', lr: 1.0, classifierLr: 0.1, weightDecay: 1e-5 });
    const nnsiam = recipe('nnsiam');
    assert.deepEqual(nnsiam.args, { projHiddenDim: 2048, projOutputDim: 2048, predHiddenDim: 4096, queueSize: 65536 });
    assert.deepEqual(nnsiam.optim, { optimizer: 'sgd', lr: 0.5, classifierLr: 0.1, weightDecay: 1e-5 });
    for (const r of [nnclr, nnbyol, nnsiam]) {
      assert.equal(r.views, 'byol');
      assert.match(r.paper, /^Dwibedi et al\. 2021, "With a Little Help from My Friends/);
    }
    assert.match(simsiam.paper, /^Chen & He 2021, "Exploring Simple Siamese/);
  });

  it("builds SimSiam's heads as solo-learn: no bias before batch norm, a plain batch norm at the projector's end (NNCLR's is affine)", () => {
    for (const name of ['simsiam', 'nnsiam', 'nnclr']) {
      const m = build(name) as SimSiam | NNCLR;
      const projector = m.projector.namedModules().map(([, l]) => l);
      const linears = projector.filter((l): l is Linear => l instanceof Linear);
      const norms = projector.filter((l): l is BatchNorm => l instanceof BatchNorm);
      assert.equal(linears.length, 3, name);
      assert.equal(norms.length, 3, name);
      assert.deepEqual(
        linears.map((l) => l.bias !== undefined),
        name === 'nnclr' ? [true, true, true] : [false, false, false],
        name,
      );
      assert.equal(norms[2].weight !== undefined, name === 'nnclr', name);
      const predictor = m.predictor.namedModules().map(([, l]) => l);
      const predictorLinears = predictor.filter((l): l is Linear => l instanceof Linear);
      assert.deepEqual(
        predictorLinears.map((l) => l.bias !== undefined),
        [name === 'nnclr', true],
        name,
      );
      m.dispose();
    }
    assert.ok(build('nnbyol') instanceof MomentumMethod);
  });

  for (const name of METHODS) {
    it(`${name}: one training step gives a finite loss and finite gradients to every trainable parameter (none to the target)`, () => {
      const m = build(name);
      const { views, labels } = batch(7);
      const trainable = m.trainableParameters();
      if (m instanceof NNBYOL) {
        const frozen = new Set([...m.momentumBackbone.parameters(), ...m.momentumProjector.parameters()]);
        assert.ok(frozen.size > 0 && trainable.every((v) => !frozen.has(v)), 'the EMA target is not trained');
      }
      const { value, grads } = tf.variableGrads(() => {
        const out = m.trainingStep(views, labels);
        if (NN_METHODS.includes(name as (typeof NN_METHODS)[number])) assert.ok(Number.isFinite(out.metrics.nn_acc.dataSync()[0]), 'nn_acc logged');
        tf.dispose(Object.values(out.metrics));
        return out.loss;
      }, trainable);
      assert.ok(Number.isFinite(value.dataSync()[0]));
      assert.deepEqual(Object.keys(grads).sort(), trainable.map((v) => v.name).sort());
      for (const g of Object.values(grads)) assert.ok(g.dataSync().every(Number.isFinite));
      for (const head of ['projector', 'predictor', 'backbone']) {
        const norm = m
          .namedParameters()
          .filter(([n]) => n.startsWith(`${head}.`))
          .reduce((s, [, v]) => s + tf.norm(grads[v.name]).dataSync()[0], 0);
        assert.ok(norm > 0, `${head} gets a gradient`);
      }
      m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
      tf.dispose([value, ...Object.values(grads), ...views, labels]);
      m.dispose();
    });

    it(`${name}: no gradient reaches the projections the targets come from (stop-gradient, neighbours constant)`, () => {
      const m = build(name);
      const rng = new Rng(11);
      const embeddings = [0, 1, 2, 3].map(() => randomRows(rng));
      const labels = tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32');
      const grads = tf.grads((...inputs: Tensor[]) => m.coupledLoss(inputs, labels).loss)(embeddings);
      for (const k of [0, 1]) assert.ok(tf.norm(grads[k]).dataSync()[0] > 0, `prediction ${k + 1} gets a gradient`);
      for (const k of [2, 3])
        assert.ok(
          grads[k].dataSync().every((x) => x === 0),
          `projection ${k - 1} gets exactly 0`,
        );
      m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
      m.dispose();
    });
  }

  for (const name of NN_METHODS) {
    it(`${name}: the targets are the support set's nearest rows to the other view, in the order the loss needs`, () => {
      const m = build(name);
      const rng = new Rng(5);
      // Rows from an earlier step, so the support set holds projections rather than its initial draws.
      queueOf(m).push(
        [randomRows(rng, K)],
        tf.tensor1d(
          Array.from({ length: K }, (_, i) => i % 3),
          'int32',
        ),
      );
      queueOf(m).flush();
      const embeddings = [0, 1, 2, 3].map(() => randomRows(rng));
      const { right, swapped } = expectedLoss(name, m, embeddings);
      const loss = m.coupledLoss(embeddings, tf.tensor1d([0, 1, 2, 0, 1, 2], 'int32')).loss.dataSync()[0];
      assert.ok(Math.abs(loss - right) < 1e-6, `${loss} vs ${right}`);
      assert.ok(Math.abs(loss - swapped) > 1e-3, 'the check tells the views apart');
      m.dispose();
    });

    it(`${name}: the step's view-1 projections (normalised) and labels are written after onTrainBatchEnd`, () => {
      const m = build(name);
      const queue = queueOf(m);
      const before = rowsOf(queue.rows());
      const { views, labels } = batch(9);
      const features = views.map((v) => m.features(v));
      const embeddings = m.embed(features, views);
      m.coupledLoss(embeddings, labels);
      assert.deepEqual(rowsOf(queue.rows()), before, 'nothing written during the step');
      m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
      const after = rowsOf(queue.rows());
      // nnbyol: embeddings[2] is the target's projection of view 1; the others: the online one.
      close(after.slice(0, B), normalized(embeddings[2]));
      assert.deepEqual(after.slice(B), before.slice(B));
      assert.deepEqual(Array.from(queue.labels().dataSync()), [0, 1, 2, 0, 1, 2, -1, -1, -1, -1]);
      assert.equal(queue.position, B);
      m.dispose();
    });
  }

  it('nearestNeighbours: the nearest rows of each view, nn_acc of view 1 against the labels, view 1 pushed', () => {
    const fresh = new FeatureQueue(4, 3, { labels: true, rng: new Rng(1) });
    const query = tf.tensor2d([[1, 0, 0]]);
    assert.equal(nearestNeighbours(fresh, query, query, tf.tensor1d([0], 'int32')).nnAcc.dataSync()[0], 0, 'unwritten rows (label -1) never match');
    fresh.dispose();
    const queue = new FeatureQueue(4, 3, { labels: true, rng: new Rng(1) });
    const rows = [
      [1, 0, 0],
      [0, 1, 0],
      [0, 0, 1],
      [-1, 0, 0],
    ];
    queue.push([tf.tensor2d(rows)], tf.tensor1d([7, 8, 9, 3], 'int32'));
    queue.flush();
    const z1 = tf.tensor2d([
      [5, 0.1, 0],
      [0, 0.2, 4],
      [-3, 0, 0.1],
    ]);
    const z2 = tf.tensor2d([
      [0, 2, 0.1],
      [-1, 0, 0],
      [0.1, 0, 2],
    ]);
    const { nn1, nn2, nnAcc } = nearestNeighbours(queue, z1, z2, tf.tensor1d([7, 1, 3], 'int32'));
    assert.deepEqual(rowsOf(nn1), [rows[0], rows[2], rows[3]]);
    assert.deepEqual(rowsOf(nn2), [rows[1], rows[3], rows[2]]);
    assert.ok(Math.abs(nnAcc.dataSync()[0] - 2 / 3) < 1e-7, `nn_acc ${nnAcc.dataSync()[0]}`);
    queue.flush();
    close(rowsOf(queue.rows()).slice(0, 3), normalized(z1));
    assert.deepEqual(Array.from(queue.labels().dataSync()), [7, 1, 3, 3]);
    queue.dispose();
  });

  it("SimSiam and NNSiam: the predictor is its own optimizer group at the base lr, unscheduled (solo-learn's static_lr); NNCLR's is not", () => {
    const settings = { optimizer: 'sgd' as const, lr: 0.5, classifierLr: 0.1, weightDecay: 1e-5, momentum: 0.9, larsEta: 0.02, larsClipLr: true };
    const schedule = { warmupEpochs: 1, warmupStartLr: 0, minLr: 0, globalBatch: 128 };
    for (const name of ['simsiam', 'nnsiam', 'nnclr']) {
      const m = build(name);
      const task = new SslTask(m, { ...settings, ...schedule });
      const configured = task.configureOptimizers({ totalSteps: 20, stepsPerEpoch: 5 });
      const [optimizer, scheduler] = [configured.optimizer as Optimizer, configured.scheduler];
      const names = optimizer.groups.map((g) => g.name);
      if (name === 'nnclr') {
        assert.deepEqual(names, ['method', 'method_no_decay', 'classifier']);
      } else {
        assert.deepEqual(names, ['method', 'method_no_decay', 'predictor', 'predictor_no_decay', 'classifier']);
        const grouped = optimizer.groups.flatMap((g) => g.params.map((p) => [g.name, p.name]));
        for (const [group, param] of grouped) assert.equal(group.startsWith('predictor'), param.startsWith('predictor.'), `${param} in ${group}`);
        for (const step of [0, 3, 12, 19]) {
          const lrs = scheduler.apply(step);
          assert.equal(lrs.predictor, 0.25, `step ${step}`);
          assert.equal(lrs.predictor_no_decay, 0.25);
          assert.ok(lrs.method < 0.25, `step ${step}: the rest of the method is scheduled (${lrs.method})`);
        }
      }
      m.dispose();
    }
  });

  for (const name of METHODS) {
    it(`${name}: the gradient cache (per-sample heads, --norm group) gives the gradients of the plain step`, () => {
      const m = build(name, 'group');
      const { views, labels } = batch(13);
      const variables = m.trainableParameters();
      const plain = tf.variableGrads(() => {
        const out = m.trainingStep(views, labels);
        tf.dispose(Object.values(out.metrics));
        return out.loss;
      }, variables);
      const cached = gradCacheGradients(m, views, labels, 4, variables);
      for (const v of variables) {
        const a = cached.grads[v.name].dataSync();
        const b = plain.grads[v.name].dataSync();
        const scale = Math.max(...Array.from(b, Math.abs), 1e-6);
        const diff = Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i])));
        assert.ok(diff / scale < 1e-4, `${v.name}: ${diff} / ${scale}`);
      }
      assert.ok(Math.abs(cached.metrics.loss.dataSync()[0] + cached.metrics.class_loss.dataSync()[0] - plain.value.dataSync()[0]) < 1e-4);
      tf.dispose(Object.values(cached.metrics));
      m.onTrainBatchEnd({ step: 1, totalSteps: 10, epoch: 0 });
      m.dispose();
    });
  }
});

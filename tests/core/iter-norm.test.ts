/**
 * IterNorm (src/core/iter-norm.ts): PyTorch parity in float64 (tests/fixtures/core/iternorm-torch.json,
 * written by scripts/gen_iternorm_fixtures.py from solo-learn's forward: output, gradients,
 * running statistics, evaluation mode), solo-learn's grouping, whitening, and a one-process
 * SyncIterNorm being IterNorm.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { IterNorm, iterNormGroups } from '../../src/core/iter-norm.js';
import { Sequential } from '../../src/core/layers.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { convertSyncBatchNorm } from '../../src/distributed/sync-batchnorm.js';
import { SyncIterNorm } from '../../src/distributed/sync-iter-norm.js';

interface IterNormCase {
  batch: number;
  features: number;
  numGroups: number;
  groups: number;
  groupSize: number;
  iterations: number;
  eps: number;
  momentum: number;
  x: number[];
  weight: number[];
  bias: number[];
  upstream: number[];
  y: number[];
  gradX: number[];
  gradWeight: number[];
  gradBias: number[];
  runningMean: number[];
  runningWm: number[];
  xEval: number[];
  yEval: number[];
}

const fixture = JSON.parse(readFileSync(new URL('../../../tests/fixtures/core/iternorm-torch.json', import.meta.url), 'utf8')) as { cases: IterNormCase[] };

/** max |a − b| / max |b|. */
function maxRelative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0;
  let diff = 0;
  for (let i = 0; i < b.length; i++) {
    scale = Math.max(scale, Math.abs(b[i]!));
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  }
  return Number.isNaN(diff) ? Infinity : diff / scale;
}

function layerFor(c: IterNormCase): IterNorm {
  const layer = new IterNorm(c.features, { numGroups: c.numGroups, iterations: c.iterations, eps: c.eps, momentum: c.momentum });
  layer.weight!.assign(tf.tensor1d(c.weight));
  layer.bias!.assign(tf.tensor1d(c.bias));
  return layer;
}

describe('IterNorm', () => {
  it('groups features as solo-learn: d = ceil(F / G), halved until it divides F', () => {
    assert.deepEqual(iterNormGroups(2048, 64), { groups: 64, groupSize: 32 });
    assert.deepEqual(iterNormGroups(12, 3), { groups: 3, groupSize: 4 });
    assert.deepEqual(iterNormGroups(8, 64), { groups: 8, groupSize: 1 });
    assert.deepEqual(iterNormGroups(10, 4), { groups: 10, groupSize: 1 });
    assert.deepEqual(iterNormGroups(48, 64), { groups: 48, groupSize: 1 });
    assert.deepEqual(iterNormGroups(96, 64), { groups: 48, groupSize: 2 });
    for (const c of fixture.cases) assert.deepEqual(iterNormGroups(c.features, c.numGroups), { groups: c.groups, groupSize: c.groupSize });
  });

  for (const c of fixture.cases) {
    it(`matches float64 PyTorch (solo-learn's forward): [${c.batch}, ${c.features}], ${c.groups} groups of ${c.groupSize}, T = ${c.iterations}: output, gradients, running statistics, eval output`, () => {
      const layer = layerFor(c);
      const x = tf.tensor2d(c.x, [c.batch, c.features]);
      const upstream = tf.tensor2d(c.upstream, [c.batch, c.features]);
      let y: Tensor | undefined;
      const { value, grads } = tf.variableGrads(() => {
        y = tf.keep(layer.forward(x));
        return tf.sum(tf.mul(y, upstream));
      }, [layer.weight!, layer.bias!]);
      const gradX = tf.grad((v: Tensor) => tf.sum(tf.mul(new Sequential(layerFor(c)).forward(v), upstream)))(x);
      const errors = {
        y: maxRelative(y!.dataSync(), c.y),
        gradX: maxRelative(gradX.dataSync(), c.gradX),
        gradWeight: maxRelative(grads[layer.weight!.name]!.dataSync(), c.gradWeight),
        gradBias: maxRelative(grads[layer.bias!.name]!.dataSync(), c.gradBias),
        runningMean: maxRelative(layer.runningMean.dataSync(), c.runningMean),
        runningWm: maxRelative(layer.runningWm.dataSync(), c.runningWm),
      };
      layer.eval();
      const yEval = layer.forward(tf.tensor2d(c.xEval, [c.batch, c.features]));
      const evalError = maxRelative(yEval.dataSync(), c.yEval);
      for (const [name, e] of Object.entries({ ...errors, yEval: evalError })) assert.ok(e < 1e-4, `${name}: relative error ${e}`);
      tf.dispose([x, upstream, y!, value, gradX, yEval, ...Object.values(grads)]);
      layer.dispose();
    });
  }

  it('whitens: with T = 5 the output of each group has a covariance close to the identity; evaluation mode changes no buffer', () => {
    const rng = new Rng(5);
    const mix = tf.tensor2d(rng.normalArray(64), [8, 8]);
    const x = tf.matMul(tf.tensor2d(rng.normalArray(256 * 8), [256, 8]), mix);
    const layer = new IterNorm(8, { numGroups: 2, iterations: 5 });
    const y = layer.forward(x);
    for (let g = 0; g < 2; g++) {
      const part = tf.slice(y, [0, 4 * g], [256, 4]);
      const centred = tf.sub(part, tf.mean(part, 0));
      const cov = tf.div(tf.matMul(centred, centred, true, false), 256);
      assert.ok(maxRelative(cov.dataSync(), tf.eye(4).dataSync()) < 0.2, `group ${g}: ${Array.from(cov.dataSync()).map((v) => v.toFixed(3))}`);
    }
    layer.eval();
    const before = [layer.runningMean.dataSync().slice(), layer.runningWm.dataSync().slice()];
    tf.dispose(layer.forward(x));
    assert.deepEqual([layer.runningMean.dataSync(), layer.runningWm.dataSync()], before);
    tf.dispose([mix, x, y]);
    layer.dispose();
  });

  it('convertSyncBatchNorm turns IterNorm into SyncIterNorm (configuration, parameters, buffers and mode kept); on one process it is IterNorm', () => {
    const c = fixture.cases[0]!;
    const model = new Sequential(layerFor(c));
    tf.dispose(model.forward(tf.tensor2d(c.x, [c.batch, c.features]))); // running statistics moved
    const before = model.stateDict();
    const snapshot = Object.fromEntries(Object.entries(before).map(([k, v]) => [k, Array.from(v.dataSync())]));
    assert.equal(convertSyncBatchNorm(model, new SingleProcessGroup()), 1);
    const [[, sync]] = model.namedChildren();
    assert.ok(sync instanceof SyncIterNorm);
    assert.equal(sync.groups, c.groups);
    assert.equal(sync.iterations, c.iterations);
    assert.equal(sync.eps, c.eps);
    assert.equal(sync.momentum, c.momentum);
    for (const [k, v] of Object.entries(model.stateDict())) assert.deepEqual(Array.from(v.dataSync()), snapshot[k], k);
    const reference = layerFor(c);
    const x = tf.tensor2d(c.xEval, [c.batch, c.features]);
    assert.deepEqual(Array.from(model.forward(x).dataSync()), Array.from(reference.forward(x).dataSync()));
    assert.equal(convertSyncBatchNorm(model, new SingleProcessGroup()), 0); // already synchronised
    model.dispose();
    reference.dispose();
  });
});

/**
 * SyncBatchNorm with W real processes over the Gloo addon, DIFFERENT data per rank
 * (docs/design.md contract 4): forward output, input gradient and DDP-averaged parameter gradients
 * equal BatchNorm on the concatenated batch (relative 1e-5 of the largest entry), for [B, C]
 * and [B, H, W, C] inputs, W = 2 and 3; running statistics are bit-identical on every rank and
 * equal BatchNorm's; evaluation mode runs no collective; convertSyncBatchNorm converts every
 * batch norm of a tiny_resnet and the converted model matches the one-process model.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TinyResNet } from '../../src/backbones/tiny-resnet.js';
import { BatchNorm, Linear, Sequential } from '../../src/core/layers.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { convertSyncBatchNorm, SyncBatchNorm } from '../../src/distributed/sync-batchnorm.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import { readF32 } from './io.js';
import { affine, bnLoss, type BnProblem, globalInput, globalShape, lossWeights } from './workers/sync-batchnorm-problems.js';
import type { SyncBnWorkerResult } from './workers/sync-batchnorm.js';

const TOL = 1e-5;

/** max |a − b| / max |reference| (the reference `full`, of which `b` may be a slice). */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>, full: ArrayLike<number> = b): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  for (let i = 0; i < full.length; i++) scale = Math.max(scale, Math.abs(full[i]!));
  return Number.isNaN(diff) ? Infinity : diff / scale;
}

function rows(data: number[], worldSize: number, rank: number): number[] {
  const n = data.length / worldSize;
  return data.slice(rank * n, (rank + 1) * n);
}

/** BatchNorm on the concatenated batch: the one-process truth for one problem. */
function reference(p: BnProblem) {
  const bn = new BatchNorm(p.channels, { momentum: 0.1 });
  const { weight, bias } = affine(p);
  bn.weight!.assign(tf.tensor1d(weight));
  bn.bias!.assign(tf.tensor1d(bias));
  const shape = globalShape(p);
  const x = tf.variable(tf.tensor(globalInput(p, 0), shape));
  const r = tf.tensor(lossWeights(p), shape);
  let y: Tensor | undefined;
  // Global loss = mean over ranks of the per-rank losses = the same expression over N samples.
  const { value, grads } = tf.variableGrads(() => {
    y = tf.keep(bn.forward(x));
    return bnLoss(y, r);
  }, [x, bn.weight!, bn.bias!]);
  const x1 = tf.tensor(globalInput(p, 1), shape);
  tf.dispose(bn.forward(x1));
  bn.eval();
  const evalY = bn.forward(x1);
  const out = {
    y: Array.from(y!.dataSync()),
    xGrad: Array.from(grads[x.name]!.dataSync()),
    weightGrad: Array.from(grads[bn.weight!.name]!.dataSync()),
    biasGrad: Array.from(grads[bn.bias!.name]!.dataSync()),
    runningMean: Array.from(bn.runningMean.dataSync()),
    runningVar: Array.from(bn.runningVar.dataSync()),
    evalY: Array.from(evalY.dataSync()),
  };
  tf.dispose([value, grads, y!, x, r, x1, evalY]);
  bn.dispose();
  return out;
}

function countBatchNorms(model: TinyResNet): number {
  return model.namedModules().filter(([, m]) => m instanceof BatchNorm).length;
}

describe('distributed/SyncBatchNorm (real processes, different data per rank)', function () {
  this.timeout(120_000);

  before(() => {
    loadGlooAddon();
  });

  for (const W of [2, 3]) {
    describe(`W = ${W}`, () => {
      const problems: BnProblem[] = [
        { label: '[B, C]', worldSize: W, batch: 7 - W, spatial: [], channels: 6, seed: 10 + W },
        { label: '[B, H, W, C]', worldSize: W, batch: 2, spatial: [3, 3], channels: 4, seed: 20 + W },
      ];
      const resnet: BnProblem = { label: 'tiny_resnet', worldSize: W, batch: 2, spatial: [8, 8], channels: 1, seed: 30 + W };
      let results: SyncBnWorkerResult[] = [];
      let resnetGrads: Float32Array;

      before(async () => {
        const dir = freshDir(`syncbn-w${W}`);
        try {
          const outcomes = await runRanks(
            'sync-batchnorm',
            {
              dir,
              worldSize: W,
              rendezvous: pathToFileURL(join(dir, 'store')).href,
              timeoutMs: 30_000,
              problems,
              resnet,
            },
            90_000,
          );
          expectAllOk(outcomes);
          results = outcomes.map((o) => o.result as SyncBnWorkerResult);
          resnetGrads = readF32(join(dir, 'resnet-grads.f32'));
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });

      problems.forEach((p, k) => {
        it(`${p.label}: output, input gradient and DDP-averaged γ/β gradients equal BatchNorm on the concatenated batch`, () => {
          const ref = reference(p);
          results.forEach(({ problems: mine }, r) => {
            const m = mine[k]!;
            const yErr = relErr(m.y, rows(ref.y, W, r), ref.y);
            assert.ok(yErr <= TOL, `rank ${r}: output error ${yErr}`);
            // Rank r's input gradient is that of Σ_q loss_q: W × the global loss's (DDP's
            // averaging of the parameter gradients upstream divides the W back out).
            const gErr = relErr(
              m.xGrad.map((g) => g / W),
              rows(ref.xGrad, W, r),
              ref.xGrad,
            );
            assert.ok(gErr <= TOL, `rank ${r}: input gradient error ${gErr}`);
            const wErr = relErr(m.weightGrad, ref.weightGrad);
            const bErr = relErr(m.biasGrad, ref.biasGrad);
            assert.ok(wErr <= TOL && bErr <= TOL, `rank ${r}: γ gradient error ${wErr}, β ${bErr}`);
            assert.equal(m.leaked, 0, `rank ${r} leaked tensors`);
          });
        });

        it(`${p.label}: negative controls — per-rank BatchNorm, and global statistics without their gradient, fail the same check`, () => {
          const ref = reference(p);
          let localWorst = 0;
          let detachedWorst = 0;
          results.forEach(({ problems: mine }, r) => {
            const c = mine[k]!.controls;
            localWorst = Math.max(localWorst, relErr(c.localY, rows(ref.y, W, r), ref.y));
            // Forward identical (global statistics), gradient wrong.
            assert.ok(relErr(c.detachedY, rows(ref.y, W, r), ref.y) <= TOL, `rank ${r}: detached-stats forward`);
            const g = c.detachedXGrad.map((v) => v / W);
            detachedWorst = Math.max(detachedWorst, relErr(g, rows(ref.xGrad, W, r), ref.xGrad));
          });
          assert.ok(localWorst > 1e-2, `per-rank statistics not caught (${localWorst})`);
          assert.ok(detachedWorst > 1e-2, `statistics without gradient not caught (${detachedWorst})`);
        });

        it(`${p.label}: running statistics are identical on every rank and equal BatchNorm's; eval mode runs no collective`, () => {
          const ref = reference(p);
          const first = results[0]!.problems[k]!;
          results.forEach(({ problems: mine }, r) => {
            const m = mine[k]!;
            assert.deepEqual(m.runningMean, first.runningMean, `rank ${r}: running mean differs from rank 0`);
            assert.deepEqual(m.runningVar, first.runningVar, `rank ${r}: running var differs from rank 0`);
            assert.equal(m.numBatchesTracked, 2);
            assert.ok(relErr(m.runningMean, ref.runningMean) <= TOL, `rank ${r}: running mean vs BatchNorm`);
            assert.ok(relErr(m.runningVar, ref.runningVar) <= TOL, `rank ${r}: running var vs BatchNorm`);
            const eErr = relErr(m.evalY, rows(ref.evalY, W, r), ref.evalY);
            assert.ok(eErr <= TOL, `rank ${r}: eval output error ${eErr}`);
            assert.equal(m.collectivesInEval, 0, `rank ${r}: eval mode ran collectives`);
            assert.equal(m.collectivesPerTrainForward, 1, `rank ${r}: collectives per training forward`);
            assert.equal(m.collectivesForwardBackward, 2, `rank ${r}: collectives per forward + backward`);
          });
        });
      });

      it('convertSyncBatchNorm converts all 9 batch norms of tiny_resnet; its forward and DDP-averaged gradients match', () => {
        const model = new TinyResNet({ inChannels: 1, imageSize: 8, rng: new Rng(resnet.seed) });
        const count = countBatchNorms(model);
        assert.equal(count, 9);
        for (const [r, res] of results.entries()) {
          const info = res.resnet!;
          assert.equal(info.batchNorms, count, `rank ${r}`);
          assert.equal(info.converted, count, `rank ${r}`);
          assert.equal(info.syncLayers, count, `rank ${r}`);
          assert.equal(info.remainingPlain, 0, `rank ${r}`);
        }
        const x = tf.tensor(globalInput(resnet, 0), globalShape(resnet));
        const featureProblem = { ...resnet, spatial: [], channels: model.featureDim };
        const r = tf.tensor2d(lossWeights(featureProblem), [W * resnet.batch, model.featureDim]);
        const features = model.forward(x);
        const ref = Array.from(features.dataSync());
        const params = model.trainableParameters();
        const { value, grads } = tf.variableGrads(() => bnLoss(model.forward(x), r), params);
        const refGrads = tf.concat(params.map((v) => tf.reshape(grads[v.name]!, [-1]))).dataSync();
        results.forEach((res, rank) => {
          const err = relErr(res.resnet!.features, rows(ref, W, rank), ref);
          assert.ok(err <= TOL, `rank ${rank}: features error ${err}`);
        });
        const gErr = relErr(resnetGrads, refGrads);
        assert.ok(gErr <= TOL, `DDP-averaged parameter gradients error ${gErr}`);
        tf.dispose([x, r, features, value, grads]);
        model.dispose();
      });
    });
  }
});

describe('distributed/SyncBatchNorm (one process)', () => {
  it('with a group of one process it is exactly BatchNorm', () => {
    const bn = new BatchNorm(3);
    const sync = SyncBatchNorm.fromBatchNorm(bn, new SingleProcessGroup());
    const x = tf.tensor2d(new Rng(1).normalArray(12, 2, 1.5), [4, 3]);
    const [a, b] = [bn.forward(x), sync.forward(x)];
    assert.deepEqual(Array.from(a.dataSync()), Array.from(b.dataSync()));
    assert.deepEqual(Array.from(bn.runningVar.dataSync()), Array.from(sync.runningVar.dataSync()));
    tf.dispose([x, a, b]);
    bn.dispose();
    sync.dispose();
  });

  it('fromBatchNorm copies configuration, parameters, buffers, trainable flags and mode', () => {
    const bn = new BatchNorm(2, { eps: 1e-3, momentum: 0.2 });
    bn.weight!.assign(tf.tensor1d([2, 3]));
    bn.bias!.assign(tf.tensor1d([-1, 1]));
    bn.runningMean.assign(tf.tensor1d([0.5, 0.25]));
    bn.runningVar.assign(tf.tensor1d([4, 9]));
    bn.numBatchesTracked.assign(tf.scalar(7, 'int32'));
    bn.bias!.trainable = false;
    bn.eval();
    const sync = SyncBatchNorm.fromBatchNorm(bn, new SingleProcessGroup());
    assert.equal(sync.eps, 1e-3);
    assert.equal(sync.momentum, 0.2);
    assert.equal(sync.training, false);
    assert.equal(sync.bias!.trainable, false);
    assert.equal(sync.weight!.trainable, true);
    for (const [name, v] of Object.entries(bn.stateDict())) {
      assert.deepEqual(Array.from(sync.stateDict()[name]!.dataSync()), Array.from(v.dataSync()), name);
    }
    const noAffine = SyncBatchNorm.fromBatchNorm(new BatchNorm(2, { affine: false }), new SingleProcessGroup());
    assert.equal(noAffine.weight, undefined);
    bn.dispose();
    sync.dispose();
    noAffine.dispose();
  });

  it('convertSyncBatchNorm: nested containers, shared layers once, refuses a BatchNorm root, leaves nothing behind', () => {
    const rng = new Rng(3);
    const shared = new BatchNorm(4);
    const model = new Sequential(new Linear(3, 4, { rng }), shared, new Sequential(new BatchNorm(4), shared));
    const before = tf.memory().numTensors;
    const n = convertSyncBatchNorm(model, new SingleProcessGroup());
    assert.equal(n, 2);
    const mods = model.namedModules().map(([, m]) => m);
    assert.ok(mods.filter((m) => m instanceof BatchNorm).every((m) => m instanceof SyncBatchNorm));
    assert.equal(mods[2], mods[5], 'a shared layer stays shared');
    assert.equal(tf.memory().numTensors, before, 'old variables disposed, new ones created');
    assert.equal(convertSyncBatchNorm(model, new SingleProcessGroup()), 0, 'already converted');
    assert.throws(() => convertSyncBatchNorm(new BatchNorm(2), new SingleProcessGroup()), /root module is itself a BatchNorm/);
    model.dispose();
  });
});

/**
 * Worker: SyncBatchNorm with W real processes (tests/distributed/sync-batchnorm.test.ts).
 * - For each problem: a SyncBatchNorm with seeded γ, β takes this rank's slice of global
 *   batch 0 in training mode; returns the output, ∂loss_r/∂x, the DDP-averaged ∂/∂γ, ∂/∂β;
 *   then a training forward on global batch 1, the running statistics (exact float32 values),
 *   and an evaluation-mode forward with the number of collectives it ran (must be 0).
 * - `resnet`: a tiny_resnet (same seed on every rank), converted with convertSyncBatchNorm;
 *   returns how many layers were converted, the training-mode features of this rank's images
 *   and writes the DDP-averaged parameter gradients (rank 0) to `<dir>/resnet-grads.f32`.
 */
import { join } from 'node:path';
import { TinyResNet } from '../../../src/backbones/tiny-resnet.js';
import { initEngine } from '../../../src/core/engine.js';
import { BatchNorm, type BatchMoments } from '../../../src/core/layers.js';
import { detach } from '../../../src/core/ops.js';
import { Rng } from '../../../src/core/random.js';
import { tf, type Tensor } from '../../../src/core/tf.js';
import { convertSyncBatchNorm, SyncBatchNorm } from '../../../src/distributed/sync-batchnorm.js';
import { writeF32 } from '../io.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';
import { affine, bnLoss, type BnProblem, countingGroup, globalInput, localShape, lossWeights, rankSlice } from './sync-batchnorm-problems.js';

/**
 * WRONG on purpose (negative control): global statistics in the forward, but the backward
 * sees only the local statistics (what a raw, non-differentiable all-reduce of the moments
 * gives).
 */
class DetachedStatsBatchNorm extends SyncBatchNorm {
  protected override batchMoments(x: Tensor, reduceAxes: number[]): BatchMoments {
    const global = super.batchMoments(x, reduceAxes);
    const local = tf.moments(x, reduceAxes);
    return {
      mean: tf.add(local.mean, detach(tf.sub(global.mean, local.mean))),
      variance: tf.add(local.variance, detach(tf.sub(global.variance, local.variance))),
      count: global.count,
    };
  }
}

interface SyncBnSpec extends BaseSpec {
  problems: BnProblem[];
  resnet?: BnProblem;
}

export interface SyncBnProblemResult {
  y: number[];
  xGrad: number[];
  weightGrad: number[];
  biasGrad: number[];
  runningMean: number[];
  runningVar: number[];
  numBatchesTracked: number;
  evalY: number[];
  /** Collectives run by the first training forward + backward (gradients). */
  collectivesForwardBackward: number;
  /** Collectives run by a training forward without gradients. */
  collectivesPerTrainForward: number;
  collectivesInEval: number;
  leaked: number;
  /** Negative controls: plain BatchNorm on the local rows (output), and the gradient of
   * DetachedStatsBatchNorm (output and input gradient). */
  controls: { localY: number[]; detachedY: number[]; detachedXGrad: number[] };
}

/** Output and input gradient of `bn` on `x` with the per-rank loss. */
function outputAndGradient(bn: BatchNorm, x: Tensor, r: Tensor): { y: number[]; xGrad: number[] } {
  let y: Tensor | undefined;
  const g = tf.grad((v: Tensor) => {
    y = tf.keep(bn.forward(v));
    return bnLoss(y, r);
  })(x);
  const out = { y: Array.from(y!.dataSync()), xGrad: Array.from(g.dataSync()) };
  tf.dispose([y!, g]);
  return out;
}

export interface SyncBnWorkerResult {
  problems: SyncBnProblemResult[];
  resnet?: { batchNorms: number; converted: number; remainingPlain: number; syncLayers: number; features: number[] };
}

run(async () => {
  const { spec, rank } = readArgs<SyncBnSpec>();
  await initEngine('cpu');
  const real = await joinGroup(spec, rank);
  const { group, calls } = countingGroup(real);
  const average = (t: Tensor) => {
    const data = Float32Array.from(t.dataSync());
    real.allReduce(data, 'avg'); // DDP: average parameter gradients over ranks
    return Array.from(data);
  };

  const problems: SyncBnProblemResult[] = [];
  for (const p of spec.problems) {
    const before = tf.memory().numTensors;
    const bn = new SyncBatchNorm(p.channels, { momentum: 0.1 }, group);
    const { weight, bias } = affine(p);
    tf.tidy(() => {
      bn.weight!.assign(tf.tensor1d(weight));
      bn.bias!.assign(tf.tensor1d(bias));
    });
    const shape = localShape(p);
    const x0 = tf.tensor(rankSlice(p, globalInput(p, 0), rank), shape);
    const x = tf.variable(x0);
    x0.dispose();
    const r = tf.tensor(rankSlice(p, lossWeights(p), rank), shape);
    let y: Tensor | undefined;
    const setAffine = (layer: BatchNorm) =>
      tf.tidy(() => {
        layer.weight!.assign(tf.tensor1d(weight));
        layer.bias!.assign(tf.tensor1d(bias));
      });
    const plain = new BatchNorm(p.channels, { momentum: 0.1 });
    const detached = new DetachedStatsBatchNorm(p.channels, { momentum: 0.1 }, group);
    setAffine(plain);
    setAffine(detached);
    const local = outputAndGradient(plain, x, r);
    const wrong = outputAndGradient(detached, x, r);
    const controls = { localY: local.y, detachedY: wrong.y, detachedXGrad: wrong.xGrad };
    plain.dispose();
    detached.dispose();
    const callsBefore = calls.n;
    const { value, grads } = tf.variableGrads(() => {
      y = tf.keep(bn.forward(x));
      return bnLoss(y, r);
    }, [x, bn.weight!, bn.bias!]);
    const collectivesForwardBackward = calls.n - callsBefore;
    const x1 = tf.tensor(rankSlice(p, globalInput(p, 1), rank), shape);
    const trainCallsBefore = calls.n;
    tf.dispose(bn.forward(x1));
    const collectivesPerTrainForward = calls.n - trainCallsBefore;
    bn.eval();
    const evalCallsBefore = calls.n;
    const evalY = bn.forward(x1);
    const collectivesInEval = calls.n - evalCallsBefore;
    problems.push({
      y: Array.from(y!.dataSync()),
      xGrad: Array.from(grads[x.name]!.dataSync()),
      weightGrad: average(grads[bn.weight!.name]!),
      biasGrad: average(grads[bn.bias!.name]!),
      runningMean: Array.from(bn.runningMean.dataSync()),
      runningVar: Array.from(bn.runningVar.dataSync()),
      numBatchesTracked: bn.numBatchesTracked.dataSync()[0]!,
      evalY: Array.from(evalY.dataSync()),
      collectivesForwardBackward,
      collectivesPerTrainForward,
      collectivesInEval,
      leaked: 0,
      controls,
    });
    tf.dispose([value, grads, y!, x, r, x1, evalY]);
    bn.dispose();
    problems[problems.length - 1]!.leaked = tf.memory().numTensors - before;
  }

  let resnet: SyncBnWorkerResult['resnet'];
  if (spec.resnet) {
    const p = spec.resnet;
    const model = new TinyResNet({ inChannels: p.channels, imageSize: p.spatial[0]!, rng: new Rng(p.seed) });
    const batchNorms = model.namedModules().filter(([, m]) => m instanceof BatchNorm).length;
    const converted = convertSyncBatchNorm(model, group);
    const modules = model.namedModules().map(([, m]) => m);
    const syncLayers = modules.filter((m) => m instanceof SyncBatchNorm).length;
    const remainingPlain = modules.filter((m) => m instanceof BatchNorm && !(m instanceof SyncBatchNorm)).length;
    const x = tf.tensor(rankSlice(p, globalInput(p, 0), rank), localShape(p));
    const features = model.forward(x);
    const featureProblem = { ...p, spatial: [], channels: model.featureDim };
    const r = tf.tensor(rankSlice(featureProblem, lossWeights(featureProblem), rank), [p.batch, model.featureDim]);
    const params = model.trainableParameters();
    const { value, grads } = tf.variableGrads(() => bnLoss(model.forward(x), r), params);
    const flat = tf.concat(params.map((v) => tf.reshape(grads[v.name]!, [-1])));
    const avg = Float32Array.from(average(flat));
    if (rank === 0) writeF32(join(spec.dir, 'resnet-grads.f32'), avg);
    resnet = { batchNorms, converted, remainingPlain, syncLayers, features: Array.from(features.dataSync()) };
    tf.dispose([x, features, r, value, grads, flat]);
  }
  real.close();
  const result: SyncBnWorkerResult = { problems, resnet };
  return result;
});

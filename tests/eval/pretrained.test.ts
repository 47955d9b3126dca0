import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { container } from 'tsyringe';
import type { Module } from '../../src/core/module.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { evalView } from '../../src/data/augment/views.js';
import { isInMemory, subset } from '../../src/data/dataset.js';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { backboneFeatures, prepareEvalModel } from '../../src/experiment/eval-model.js';
import { resolvePretrained } from '../../src/experiment/pretrained.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { runTraining } from '../../src/experiment/train.js';
import type { BaseMethod } from '../../src/methods/base.js';
import { registerStrategy, SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { tempDir } from '../helpers/run.js';

const SMOKE: TrainConfigInput = {
  dataset: 'synthetic',
  imageSize: 16,
  syntheticSize: 256,
  backbone: 'mlp',
  batchSize: 32,
  workers: 0,
  valEvery: 0,
  methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
};

/** One process; at setup (before the first step) records the backbone features of `images` and the classifier weights. */
class CapturingStrategy extends SingleDeviceStrategy {
  features: number[] = [];
  classifier: number[] = [];
  constructor(private readonly images: () => Tensor) {
    super();
  }
  override setup(model?: Module): void {
    const method = model as BaseMethod;
    method.eval();
    this.features = Array.from(tf.tidy(() => method.features(this.images())).dataSync());
    this.classifier = Array.from(method.classifier.weight.dataSync());
    method.train();
  }
}

async function firstStep(input: TrainConfigInput, images: () => Tensor): Promise<CapturingStrategy> {
  const strategy = new CapturingStrategy(images);
  const scope = container.createChildContainer();
  registerStrategy('capturing', { useFactory: () => strategy }, scope);
  await runTraining(buildConfig({ ...SMOKE, maxSteps: 1, epochs: 1, strategy: 'capturing', ...input }), { container: scope, callbacks: [] });
  return strategy;
}

describe('--pretrained: a new pre-training run starts from a loaded backbone', function () {
  this.timeout(120_000);
  const dir = tempDir('ssl-zoo-pretrained-');
  const source = join(dir, 'source');

  it("its first-step features are the source run's, its heads are fresh; without it they differ", async () => {
    await runTraining(buildConfig({ ...SMOKE, epochs: 2, runDir: source, seed: 3 }), { callbacks: [] });
    // Reference: the source run's backbone on four test images (eval mode, eval view).
    const model = await prepareEvalModel({ kind: 'pretrained', source: resolvePretrained(source, '--pretrained') }, {}, '--pretrained');
    const testSplit = model.experiment.test;
    assert.ok(testSplit && isInMemory(testSplit));
    const test = subset(testSplit, [0, 1, 2, 3]);
    const reference = await backboneFeatures(model, test, 4);
    const expected = Array.from(reference.dataSync());
    const { height: h, width: w, channels: c } = test;
    const views = Float32Array.from([0, 1, 2, 3].flatMap((i) => Array.from(evalView(test.pixels, i * h * w * c, h, w, c, model.transform))));
    const S = model.transform.cropSize;
    const images = () => tf.tensor4d(views, [4, S, S, c]);
    tf.dispose(reference);
    model.method.dispose();

    const fromSource = await firstStep({ pretrained: source, runDir: join(dir, 'from-source') }, images);
    assert.deepEqual(fromSource.features, expected);
    const fresh = prepareExperiment(buildConfig({ ...SMOKE })).createMethod();
    assert.deepEqual(fromSource.classifier, Array.from(fresh.classifier.weight.dataSync()), 'the classifier is freshly initialised');
    fresh.dispose();

    const scratch = await firstStep({ runDir: join(dir, 'scratch') }, images);
    assert.notDeepEqual(scratch.features, expected);
  });
});

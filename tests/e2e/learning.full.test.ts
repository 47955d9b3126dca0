import { strict as assert } from 'node:assert';
import { buildConfig } from '../../src/experiment/config.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { runTraining, validationSettings } from '../../src/experiment/train.js';
import { initEngine } from '../../src/core/engine.js';
import { SslTask } from '../../src/methods/task.js';
import { tempDir } from '../helpers/run.js';

describe('learning', function () {
  this.timeout(900_000);

  it('SimCLR on synthetic data: the loss falls and kNN accuracy beats the same backbone at random init', async () => {
    const config = buildConfig({
      method: 'simclr',
      backbone: 'tiny_resnet',
      dataset: 'synthetic',
      imageSize: 16,
      syntheticSize: 512,
      batchSize: 64,
      epochs: 4,
      lr: 1.0,
      workers: 1,
      knnTrainSamples: 0,
      valEvery: 4,
      runDir: tempDir(),
      methodArgs: { projHiddenDim: 128, projOutputDim: 64 },
    });
    // The same backbone and weights (same seed) before any training, evaluated the same way.
    await initEngine(config.backend);
    const experiment = prepareExperiment(config);
    const untrained = experiment.createMethod();
    const baseline = await new SslTask(
      untrained,
      { ...experiment.optim, globalBatch: config.batchSize },
      validationSettings(config, experiment, config.batchSize),
    ).validate();
    untrained.dispose();

    const run = await runTraining(config, { callbacks: [] });
    const losses = run.fit.losses;
    const perEpoch = losses.length / config.epochs;
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const first = mean(losses.slice(0, perEpoch));
    const last = mean(losses.slice(-perEpoch));
    assert.ok(last < first - 0.05, `loss fell from ${first.toFixed(3)} to ${last.toFixed(3)}`);
    const trained = run.fit.validation['val/knn_acc1'];
    assert.ok(trained > baseline.knn_acc1 + 0.05, `kNN top-1 ${trained} after training vs ${baseline.knn_acc1} at random init`);
  });
});

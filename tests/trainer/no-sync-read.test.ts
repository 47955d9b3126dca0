/**
 * No synchronous read of the device during training (docs: DESIGN.md, "Engines, and why"):
 * WebGPU in Node cannot read synchronously, and a synchronous read stalls a GPU's queue. A
 * short run of each method in {@link METHODS} on the WebGPU engine (SwiftShader here), by the
 * trainer with the run's loggers and progress display, with the backend's `readSync` and
 * `Tensor.prototype.dataSync` / `arraySync` counting their calls (and throwing, naming the
 * caller) from the trainer's `onFitStart` to its `onFitEnd`: the steps, their metrics, logging
 * and the final checkpoint. Two steps of a tiny MLP on 8x8 images (a few seconds each on
 * SwiftShader). The engine is set up once for the file: the methods share it.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { MultiViewLoader } from '../../src/data/loader.js';
import { RandomSampler } from '../../src/data/sampler.js';
import { buildConfig } from '../../src/experiment/config.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { getMethodClass } from '../../src/methods/registry.js';
import { SslTask } from '../../src/methods/task.js';
import { ProgressBar, type Callback } from '../../src/trainer/callbacks.js';
import { RunDirLogger } from '../../src/trainer/loggers.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { Trainer } from '../../src/trainer/trainer.js';
import { tempDir } from '../helpers/run.js';
import { forbidSyncReads, useCpu, useWebGpu } from '../helpers/webgpu.js';

/** The methods checked: those whose losses and state read nothing synchronously (add a method here once it does). */
const METHODS = ['simclr', 'byol'];

/** Small heads (the defaults are thousands wide): those of these arguments that a method declares. */
const SMALL_HEADS: Record<string, number> = { projHiddenDim: 16, projOutputDim: 8, predHiddenDim: 16 };

function smallHeads(method: string): Record<string, number> {
  const declared = Object.keys(getMethodClass(method).args);
  return Object.fromEntries(Object.entries(SMALL_HEADS).filter(([name]) => declared.includes(name)));
}

/** The synchronous reads made between `onFitStart` and `onFitEnd`, each with its caller's stack. */
interface SyncReads {
  calls: string[];
  callback: Callback;
}

/**
 * A callback that, from `onFitStart` to `onFitEnd`, replaces the backend's `readSync` and
 * `Tensor.prototype.dataSync` / `arraySync` by functions that record the call and throw.
 */
function forbidSyncReadsDuringFit(): SyncReads {
  const calls: string[] = [];
  let restore: (() => void) | undefined;
  const callback: Callback = {
    onFitStart: () => {
      restore = forbidSyncReads(calls);
    },
    onFitEnd: () => {
      restore?.();
      restore = undefined;
    },
  };
  return { calls, callback };
}

describe('no synchronous read during training (WebGPU engine)', function () {
  this.timeout(120_000);

  before(async () => {
    await useWebGpu();
  });

  after(async () => {
    await useCpu();
  });

  for (const method of METHODS) {
    it(`${method}: two steps, their metrics logged at each, and the last checkpoint, with no readSync, dataSync or arraySync`, async () => {
      const runDir = tempDir();
      const config = buildConfig({
        method,
        backend: 'webgpu',
        backbone: 'mlp',
        dataset: 'synthetic',
        imageSize: 8,
        syntheticSize: 16,
        batchSize: 4,
        workers: 0,
        warmupEpochs: 0,
        methodArgs: smallHeads(method),
      });
      const experiment = prepareExperiment(config);
      const task = new SslTask(experiment.createMethod(), { ...experiment.optim, globalBatch: config.batchSize });
      const loader = new MultiViewLoader({
        dataset: experiment.train,
        views: experiment.views,
        batchSize: config.batchSize,
        sampler: new RandomSampler(experiment.train.length, config.seed),
        seed: config.seed,
        workers: 0,
      });
      const data = { batchSize: config.batchSize, numBatches: () => loader.numBatches(), batches: loader.batches.bind(loader), close: () => loader.close() };
      const reads = forbidSyncReadsDuringFit();
      const progress = new PassThrough();
      const options = { maxEpochs: 1, maxSteps: 2, logEvery: 1, valEvery: 0, checkpointEvery: 0, runDir, config: { seed: config.seed } };
      const trainer = new Trainer(new SingleDeviceStrategy(), [new RunDirLogger(runDir)], options, [
        new ProgressBar(1, 1, progress as unknown as NodeJS.WriteStream),
        reads.callback,
      ]);
      try {
        const fit = await trainer.fit(task, data).catch((e: unknown) => {
          throw new Error(`training failed (${reads.calls.length} synchronous reads): ${e instanceof Error ? e.message : String(e)}\n${reads.calls[0] ?? ''}`);
        });
        assert.deepEqual(reads.calls, [], `synchronous reads during training; the first:\n${reads.calls[0]}`);
        assert.equal(fit.progress.step, 2);
        assert.ok(fit.losses.length === 2 && fit.losses.every(Number.isFinite), `losses ${fit.losses}`);
        const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as Record<string, number>);
        assert.deepEqual(
          rows.map((r) => r.step),
          [1, 2],
        );
        assert.ok(rows.every((r) => Number.isFinite(r['train/loss'])));
        assert.match(String(progress.read()), /step 2\/\d+ loss=/);
      } finally {
        task.method.dispose();
      }
    });
  }
});

/**
 * No synchronous read of the device during training (docs: DESIGN.md, "Engines, and why"):
 * WebGPU in Node cannot read synchronously, and a synchronous read stalls a GPU's queue. Two
 * steps of SimCLR and of BYOL (a momentum target) on a tiny MLP with 8x8 images, on the WebGPU
 * engine (SwiftShader), run by the trainer with the run's logger and progress display, with
 * the backend's `readSync` and `Tensor.prototype.dataSync` / `arraySync` refused
 * (src/core/sync-reads.ts) from the trainer's `onFitStart` to its `onFitEnd`: the steps, their
 * metrics, logging and the final checkpoint. Every method's own step is checked the same way by
 * `verify --engine-against` on webgpu (tests/verify/engine-against.full.test.ts), which runs each
 * step with synchronous reads refused; what these two runs add is the trainer around the step.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { forbidSyncReads } from '../../src/core/sync-reads.js';
import { buildConfig } from '../../src/experiment/config.js';
import { inProcessLoader, prepareExperiment } from '../../src/experiment/experiment.js';
import { SslTask } from '../../src/methods/task.js';
import { ProgressBar, type Callback } from '../../src/trainer/callbacks.js';
import { RunDirLogger } from '../../src/trainer/loggers.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { Trainer } from '../../src/trainer/trainer.js';
import { tempDir } from '../helpers/run.js';
import { useCpu, useWebGpu } from '../helpers/webgpu.js';

/** Small heads (the defaults are thousands wide). */
const HEADS = { projHiddenDim: 16, projOutputDim: 8 };

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

  for (const method of ['simclr', 'byol']) {
    it(`${method}: two steps, their metrics logged at each, and the last checkpoint, with no readSync, dataSync or arraySync`, async () => {
      const runDir = tempDir();
      const config = buildConfig({
        method,
        backend: 'webgpu',
        backbone: 'mlp',
        dataset: 'synthetic',
        imageSize: 8,
        syntheticSize: 16, // whole batches: the two steps see the same batch size
        batchSize: 4,
        workers: 0,
        warmupEpochs: 0,
        methodArgs: method === 'byol' ? { ...HEADS, predHiddenDim: 16 } : HEADS,
      });
      const experiment = prepareExperiment(config);
      const task = new SslTask(experiment.createMethod(), { ...experiment.optim, globalBatch: config.batchSize });
      const loader = inProcessLoader(experiment, config);
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

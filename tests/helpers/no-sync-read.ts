/**
 * The check that nothing reads the device synchronously during training (docs: DESIGN.md,
 * "Engines, and why"): WebGPU in Node cannot read synchronously, and a synchronous read
 * stalls a GPU's queue. A short run of each method given on the WebGPU engine (SwiftShader here), by the
 * trainer with the run's loggers and progress display, with the backend's `readSync` and
 * `Tensor.prototype.dataSync` / `arraySync` counting their calls (and throwing, naming the
 * caller) from the trainer's `onFitStart` to its `onFitEnd`: the steps, their metrics, logging
 * and the final checkpoint. Two steps on 8x8 images, of a tiny MLP (a few seconds each on
 * SwiftShader) or, for a method that needs feature maps, tiny_resnet (about 30 s). The
 * engine is set up once per suite: its methods share it.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import * as backbones from '../../src/backbones/index.js';
import { buildConfig } from '../../src/experiment/config.js';
import { inProcessLoader, prepareExperiment } from '../../src/experiment/experiment.js';
import { getMethodClass } from '../../src/methods/registry.js';
import { SslTask } from '../../src/methods/task.js';
import { ProgressBar, type Callback } from '../../src/trainer/callbacks.js';
import { RunDirLogger } from '../../src/trainer/loggers.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { Trainer } from '../../src/trainer/trainer.js';
import { tempDir } from './run.js';
import { registerVitMicro, VIT_MICRO } from './vit-micro.js';
import { forbidSyncReads, useCpu, useWebGpu } from './webgpu.js';

/** The methods the fast tier checks (tests/trainer/no-sync-read.test.ts); the full tier checks every other. */
export const FAST_TIER_METHODS = ['simclr', 'byol'];

/** Small heads, queues and prototypes (the defaults are thousands wide): those of these arguments that a method declares. */
const SMALL_HEADS: Record<string, number> = {
  projHiddenDim: 16,
  projOutputDim: 8,
  predHiddenDim: 16,
  mapsHiddenDim: 16,
  mapsOutputDim: 8,
  queueSize: 8,
  numPrototypes: 5,
};

/** A ViT's settings: 16 patches of 4 px (vit_micro: tests/helpers/vit-micro.ts). */
const VIT = { backbone: VIT_MICRO, imageSize: 16, patchSize: 4 };

/** Where a method needs other settings than a tiny MLP on 8x8 images, batch 4. */
const SETTINGS: Record<
  string,
  { backbone?: string; imageSize?: number; patchSize?: number; batchSize?: number; crops?: string; methodArgs?: Record<string, number> }
> = {
  vicregl: { backbone: 'tiny_resnet' }, // feature maps
  all4one: { methodArgs: { transformerLayers: 1, transformerHeads: 2 } }, // a smaller transformer over the neighbours
  swav: { crops: '2x8:0.14-1,2x8:0.05-0.14' }, // the mlp takes 8 x 8 crops only
  wmse: { batchSize: 12, methodArgs: { whiteningSize: 12 } }, // whitening needs more rows than dimensions
  mae: { ...VIT, methodArgs: { decoderEmbedDim: 32, decoderDepth: 1, decoderNumHeads: 2 } },
  ijepa: { ...VIT, methodArgs: { predictorEmbedDim: 12, predictorDepth: 1, contextPatches: 4 } },
  msn: VIT,
  ibot: VIT,
  dinov2: VIT,
};

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

/** A mocha suite: each of `methods` trains two steps on the WebGPU engine with every synchronous read refused. */
export function describeNoSyncReads(title: string, methods: string[]): void {
  describe(title, function () {
    this.timeout(120_000);

    before(async () => {
      registerVitMicro(backbones);
      await useWebGpu();
    });

    after(async () => {
      await useCpu();
    });

    for (const method of methods) {
      it(`${method}: two steps, their metrics logged at each, and the last checkpoint, with no readSync, dataSync or arraySync`, async () => {
        const runDir = tempDir();
        const settings = SETTINGS[method] ?? {};
        const config = buildConfig({
          method,
          backend: 'webgpu',
          backbone: settings.backbone ?? 'mlp',
          dataset: 'synthetic',
          imageSize: settings.imageSize ?? 8,
          ...(settings.patchSize ? { patchSize: settings.patchSize } : {}),
          ...(settings.crops ? { crops: settings.crops } : {}),
          syntheticSize: 4 * (settings.batchSize ?? 4), // whole batches: the two steps see the same batch size
          batchSize: settings.batchSize ?? 4,
          workers: 0,
          warmupEpochs: 0,
          methodArgs: { ...smallHeads(method), ...settings.methodArgs },
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
            throw new Error(
              `training failed (${reads.calls.length} synchronous reads): ${e instanceof Error ? e.message : String(e)}\n${reads.calls[0] ?? ''}`,
            );
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
}

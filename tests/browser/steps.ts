/**
 * Optimizer steps of one method on seeded synthetic inputs, written once and run both in Node
 * (on the library's Node modules) and in a page (on the browser bundle): the library is a
 * parameter, so this module imports at run time only tests/helpers/vit-micro.ts (itself
 * without imports), and both are served to the page as they are.
 */
import type * as Zoo from '../../src/browser.js';
import { registerVitMicro } from '../helpers/vit-micro.js';

/** One method's steps: what to build and how many steps to take. */
export interface StepSpec {
  method: string;
  backbone: string;
  /** Method arguments (small heads, queues, decoders). */
  args: Record<string, number>;
  imageSize: number;
  channels: number;
  batchSize: number;
  steps: number;
  seed: number;
  patchSize?: number;
  /** The optimizer (default LARS). */
  optimizer?: 'sgd' | 'lars' | 'adamw';
}

/** Method arguments that keep any method's heads tiny. */
export const SMALL_ARGS: Readonly<Record<string, number>> = {
  projHiddenDim: 16,
  projOutputDim: 8,
  predHiddenDim: 16,
  queueSize: 8,
  numPrototypes: 5,
  mapsHiddenDim: 8,
  mapsOutputDim: 4,
};

/** Small heads, queues and prototypes, for any method: the arguments of {@link SMALL_ARGS} that `method` declares. */
export function smallArgs(zoo: typeof Zoo, method: string): Record<string, number> {
  const declared = zoo.getMethodClass(method).args;
  return Object.fromEntries(Object.entries(SMALL_ARGS).filter(([name]) => name in declared));
}

/**
 * The loss of each of `spec.steps` optimizer steps (LARS unless `spec.optimizer` says otherwise) of
 * `spec.method`, on views of seeded normal noise (two, or the method's global crops where it takes more), through the trainer's
 * {@link Zoo.StepSequence}; the engine is whatever the caller initialised.
 */
export async function stepLosses(zoo: typeof Zoo, spec: StepSpec): Promise<number[]> {
  const { imageSize, channels, batchSize } = spec;
  registerVitMicro(zoo);
  const cls = zoo.getMethodClass(spec.method);
  const method = new cls({
    createBackbone: (rng) => zoo.createBackbone(spec.backbone, { inChannels: channels, imageSize, rng, patchSize: spec.patchSize }),
    numClasses: 3,
    rng: new zoo.Rng(spec.seed),
    args: zoo.resolveMethodArgs(spec.method, spec.args),
    // The memory banks (DeepClusterV2) hold one row per sample: the batch is the data set.
    datasetSize: batchSize,
  });
  const task = new zoo.SslTask(method, {
    ...{ optimizer: spec.optimizer ?? 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-5, momentum: 0.9, larsEta: 0.02, larsClipLr: true },
    ...{ warmupEpochs: 0, warmupStartLr: 0, minLr: 0, globalBatch: batchSize },
  });
  const strategy = new zoo.SingleDeviceStrategy();
  task.setup({ group: strategy.group });
  const { optimizer, scheduler } = task.configureOptimizers({ totalSteps: spec.steps, stepsPerEpoch: spec.steps });
  const sequence = new zoo.StepSequence({ module: task, strategy, optimizer, scheduler, variables: method.trainableParameters() });
  const rng = new zoo.Rng(spec.seed + 1);
  const shape: [number, number, number, number] = [batchSize, imageSize, imageSize, channels];
  const size = batchSize * imageSize * imageSize * channels;
  const viewCount = Math.max(2, cls.crops.globalCrops);
  const batch = {
    views: Array.from({ length: viewCount }, () => Float32Array.from(rng.normalArray(size))),
    ...{
      shape,
      shapes: Array.from({ length: viewCount }, () => shape),
      labels: Int32Array.from({ length: batchSize }, (_, i) => i % 3),
      indices: Int32Array.from({ length: batchSize }, (_, i) => i),
      index: 0,
      epoch: 0,
      seed: spec.seed,
      // Each sample's crop box (top, left, height, width) and flip in a 2x larger source image (VICRegL matches by position).
      crops: Array.from({ length: viewCount }, (_, v) =>
        Float32Array.from({ length: batchSize * 5 }, (_, i) => (i % 5 === 4 ? (i + v) % 2 : i % 5 < 2 ? (i + v) % imageSize : imageSize - ((i + 2 * v) % 3))),
      ),
    },
  };
  const progress = { epoch: 0, step: 0, batchInEpoch: 0, totalSteps: spec.steps };
  const losses: number[] = [];
  for (let step = 0; step < spec.steps; step++) {
    sequence.addBatch(batch, progress);
    const { metrics } = await sequence.finishStep(progress);
    const [read] = await zoo.readMetrics([metrics], strategy);
    losses.push(read.local.loss);
  }
  return losses;
}

/**
 * Augmented views of 8 synthetic 16x16 colour images, every pixel operation drawn often:
 * two SimCLR views (crop 12) with colour jitter and blur always, grayscale, solarization and
 * flips half the time, and the eval view; concatenated, as plain numbers.
 */
export function augmentedPixels(zoo: typeof Zoo, seed: number): number[] {
  const dataset = zoo.syntheticDataset({ split: 'train', seed, size: 8, imageSize: 16, channels: 3 });
  const overrides = { colorJitterProb: 1, gaussianBlurProb: 1, grayscaleProb: 0.5, solarizationProb: 0.5, hflipProb: 0.5 };
  const indices = Int32Array.from({ length: 8 }, (_, i) => i);
  const { views } = zoo.augmentBatch(dataset, zoo.simclrViews(dataset, 12, { overrides }), seed, 0, indices);
  const evalView = zoo.evalBatch(dataset, zoo.evalTransform(dataset, 12), indices);
  return [...views, evalView].flatMap((view) => Array.from(view));
}

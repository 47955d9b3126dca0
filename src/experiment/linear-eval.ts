/**
 * `ssl-train linear`: offline linear evaluation of a backbone in its own run directory
 * (config.json, metrics.jsonl, summary.json, checkpoints/last.ckpt; W&B when asked), as
 * solo-learn's `main_linear.py`, run by the trainer: resumable, on one or W ranks.
 */
import { NO_COLOR_OPS } from '../data/augment/recipes.js';
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { invalidValue, UserError } from '../core/errors.js';
import { Linear } from '../core/layers.js';
import { Rng } from '../core/random.js';
import { tf, type Tensor } from '../core/tf.js';
import { evalBatch, type EvalTransform, type ViewAugmentation } from '../data/augment/views.js';
import { normalizationFor, sampleDataset, subset, type Dataset } from '../data/dataset.js';
import { augmentStoreBatch } from '../data/loader-batch.js';
import { PixelReader, pixelStore, type SkippedFile } from '../data/pixels.js';
import { container as rootContainer } from 'tsyringe';
import type { ProcessGroup } from '../core/process-group.js';
import type { Accuracy } from '../eval/knn.js';
import { LinearEvalTask, linearStepsPerEpoch, linearTrainingData, type LabelledSet, type LinearEvalModel } from '../eval/linear.js';
import { scaleLearningRate } from '../optim/index.js';
import { CALLBACK, type Callback } from '../trainer/callbacks.js';
import { historyRows, readMetrics, runDirPaths } from '../trainer/run-dir.js';
import { acquireRunLock, runLockPath, type RunLock } from '../trainer/run-lock.js';
import { Trainer, TRAINER_OPTIONS, type TrainerOptions } from '../trainer/trainer.js';
import { parseTags } from '../tracking/index.js';
import { buildConfig, type TrainConfig } from './config.js';
import { registerAround, registerLoggers, registerRunStrategy, type RunStrategy } from './run-scope.js';
import type { RunOptions } from './train.js';
import {
  backboneFeatures,
  initConfig,
  pixelFeatures,
  prepareEvalModel,
  requireLabels,
  validationSplit,
  type BackboneInit,
  type EvalDataOptions,
} from './eval-model.js';

/** What is evaluated: a backbone, or the raw pixels (the eval views flattened; the baseline of the benchmark). */
export type LinearFeatures = BackboneInit | { kind: 'pixels'; config: TrainConfig };

/** Training-time augmentation of linear evaluation: none, or solo-learn's supervised one. */
export const LINEAR_AUGMENTATIONS = ['none', 'crop-flip'] as const;
export type LinearAugmentation = (typeof LINEAR_AUGMENTATIONS)[number];

/** W&B settings (as the training flags: `logger: 'wandb'` or a project turns it on). */
export type TrackingOptions = Partial<Pick<TrainConfig, 'logger' | 'wandbProject' | 'wandbEntity' | 'wandbName' | 'wandbGroup' | 'wandbTags' | 'wandbMode'>>;

/** Options of {@link runLinearEval}. */
export interface LinearRunOptions {
  features: LinearFeatures;
  data: EvalDataOptions;
  /** Default `runs/linear-<source>-<timestamp>`; must not hold a run yet, unless resuming. */
  runDir?: string;
  /**
   * A checkpoint path, or `auto`: the newest valid checkpoint in `<runDir>/checkpoints` (a
   * fresh start when there is none); see the trainer's `resume`. Needs `runDir`.
   */
  resume?: string;
  epochs: number;
  /** The global batch (over all ranks; each rank trains on batchSize / W). */
  batchSize: number;
  /** Base lr per 256 samples (applied: lr x batch / 256). */
  lr: number;
  momentum: number;
  weightDecay: number;
  augmentation: LinearAugmentation;
  /** Train the backbone too (with the same optimizer and lr). */
  finetune: boolean;
  seed: number;
  /** Training / validation images used (0: all). */
  trainSamples: number;
  valSamples: number;
  /** Log the training loss and accuracy every this many steps (default 10). */
  logEvery?: number;
  /** Write `checkpoints/last.ckpt` every this many steps (default: the steps of one epoch, i.e. at every epoch end). */
  checkpointEverySteps?: number;
  /** Seconds a collective waits for the other ranks (several ranks; default the pre-training run's `timeout`). */
  timeout?: number;
  tracking: TrackingOptions;
  /** One progress line per epoch, and the trainer's notes (resuming, skipped checkpoints); default none. */
  print?: (line: string) => void;
}

/** What one validated epoch of linear evaluation gave. */
export interface LinearEpoch {
  /** Zero-based epoch. */
  epoch: number;
  /** Optimizer steps done after this epoch. */
  step: number;
  /** Validation top-1 / top-5 in [0, 1]. */
  val: Accuracy;
  valLoss: number;
}

/** A finished linear evaluation. */
export interface LinearRunResult {
  runDir: string;
  /**
   * Every validated epoch, read back from the run directory's `metrics.jsonl` (so a resumed
   * run's includes the epochs before the checkpoint); empty on ranks other than 0, or when
   * the container's loggers write no `metrics.jsonl`.
   */
  history: LinearEpoch[];
  /** Figures after the last epoch (the same on every rank). */
  final: LinearEpoch;
  /** Seconds spent computing features before training (0 when they are not precomputed). */
  featureSec: number;
  /** Training time, earlier attempts up to the checkpoint resumed from included. */
  wallTimeSec: number;
}

/**
 * solo-learn's supervised training view (torchvision RandomResizedCrop(S, scale 0.08-1)
 * and RandomHorizontalFlip), normalised as the eval view.
 */
export function supervisedView(dataset: Dataset): ViewAugmentation {
  const { mean, std } = normalizationFor(dataset);
  return {
    cropSize: Math.min(dataset.height, dataset.width),
    cropScale: [0.08, 1],
    cropRatio: [3 / 4, 4 / 3],
    hflipProb: 0.5,
    ...NO_COLOR_OPS,
    gaussianBlurProb: 0,
    solarizationProb: 0,
    mean,
    std,
  };
}

/** A set whose inputs are rows of precomputed `features [N, F]`. */
function featureSet(features: Tensor, labels: Int32Array): LabelledSet {
  return { length: labels.length, labels, inputs: (indices) => tf.tidy(() => tf.gather(features, tf.tensor1d(indices, 'int32'))) };
}

/**
 * A set whose inputs are `[n, S, S, C]` views of `dataset`, its images read per batch (a
 * folder's decoded, never all in memory): in training augmented with `view`, keyed by
 * (seed, epoch, index) as the loader's views, else the eval view `transform`. An unreadable
 * file shows the next readable one (see `PixelReader`); `onUnreadable` hears of it once.
 */
export function imageSet(
  dataset: Dataset,
  transform: EvalTransform,
  view: ViewAugmentation | undefined,
  seed: number,
  onUnreadable?: (file: SkippedFile) => void,
): LabelledSet {
  const reader = new PixelReader(pixelStore(dataset));
  const { height, width, channels: c } = dataset;
  return {
    length: dataset.length,
    labels: dataset.labels,
    inputs: async (indices, epoch) => {
      if (view && epoch >= 0) {
        const batch = await augmentStoreBatch(reader, [view], seed, epoch, indices);
        if (onUnreadable) batch.skipped.forEach(onUnreadable);
        return tf.tensor4d(batch.views[0], [indices.length, view.cropSize, view.cropSize, c]);
      }
      const batch = await reader.read(indices);
      if (onUnreadable) batch.skipped.forEach(onUnreadable);
      const S = transform.cropSize;
      return tf.tensor4d(evalBatch({ pixels: batch.pixels, height, width, channels: c }, transform, batch.rows), [indices.length, S, S, c]);
    },
  };
}

/** Refuses what cannot run, before anything is loaded or written. */
function checkOptions(options: LinearRunOptions): void {
  if (options.features.kind === 'pixels' && (options.finetune || options.augmentation !== 'none')) {
    throw new UserError('linear: raw-pixel features are precomputed: they take neither --finetune nor --augmentation crop-flip');
  }
  if (options.resume !== undefined && options.runDir === undefined) {
    throw new UserError(`--resume: ${options.resume} needs --run-dir, the directory of the evaluation to resume`);
  }
  if (options.runDir !== undefined && options.resume === undefined && existsSync(runDirPaths(options.runDir).config)) {
    throw invalidValue('--run-dir', options.runDir, 'a directory that holds no run yet (it has a config.json; add --resume auto to continue it)');
  }
}

/**
 * `[N, F]` features of `dataset` by `compute`; with W ranks each computes a contiguous W-th
 * (the last padded by repeating the last image) and the shards are all-gathered, so every
 * rank ends with the features of the whole set, in order.
 */
async function shardedFeatures(dataset: Dataset, compute: (d: Dataset) => Promise<Tensor>, group: ProcessGroup): Promise<Tensor> {
  if (group.worldSize === 1) return compute(dataset);
  const per = Math.ceil(dataset.length / group.worldSize);
  const start = group.rank * per;
  const local = await compute(
    subset(
      dataset,
      Int32Array.from({ length: per }, (_, i) => Math.min(start + i, dataset.length - 1)),
    ),
  );
  const columns = local.shape[1] ?? 1;
  const all = group.allGather(local.dataSync() as Float32Array);
  local.dispose();
  return tf.tensor2d(all.subarray(0, dataset.length * columns), [dataset.length, columns]);
}

/** The validated epochs recorded in `runDir`'s `metrics.jsonl` (none when there is no such file). */
function historyOf(runDir: string): LinearEpoch[] {
  if (!existsSync(runDirPaths(runDir).metrics)) return [];
  return historyRows(readMetrics(runDir))
    .filter((row) => row.values['val/acc1'] !== undefined)
    .map(({ step, values }) => ({
      epoch: values.epoch as number,
      step,
      val: { top1: values['val/acc1'] as number, top5: values['val/acc5'] as number },
      valLoss: values['val/loss'] as number,
    }));
}

/** One line per epoch on rank 0: the mean training loss of the epoch's steps (those this process ran) and the validation accuracy. */
function epochLines(epochs: number, print: (line: string) => void): Callback {
  const losses: number[] = [];
  return {
    onTrainBatchEnd: (_progress, metrics) => void losses.push(metrics['train/loss']),
    onEpochEnd: (progress, metrics) => {
      const loss = losses.reduce((a, b) => a + b, 0) / Math.max(1, losses.length);
      losses.length = 0;
      const percent = (x: number) => (100 * x).toFixed(2);
      print(
        `linear: epoch ${progress.epoch + 1}/${epochs}: loss ${loss.toFixed(4)}, val top-1 ${percent(metrics['val/acc1'])}%, top-5 ${percent(metrics['val/acc5'])}%`,
      );
    },
  };
}

/**
 * Trains a linear classifier on the features (or, fine-tuning, the whole network) and
 * evaluates it on the test split after every epoch, as a {@link LinearEvalTask} run by the
 * trainer (resolved from a child of `wiring.container`, as pre-training's, with its strategy
 * and loggers): in its own run directory (config.json, metrics.jsonl, summary.json,
 * checkpoints/last.ckpt holding the whole method), resumable with `resume`, on the ranks of
 * `wiring.worker`'s job (DDP: each rank trains on its slice of every global batch), stopped
 * at a non-finite step. With no augmentation and no fine-tuning the features are computed
 * once (the fast path; with W ranks, a W-th each).
 */
export async function runLinearEval(options: LinearRunOptions, wiring: Pick<RunOptions, 'container' | 'worker'> = {}): Promise<LinearRunResult> {
  checkOptions(options);
  const pixels = options.features.kind === 'pixels';
  const init: BackboneInit = options.features.kind === 'pixels' ? { kind: 'random-init', config: options.features.config } : options.features;
  const model = await prepareEvalModel(init, options.data, 'linear', requireLabels('linear'));
  const { method } = model;
  const scope = (wiring.container ?? rootContainer).createChildContainer();
  let selected: RunStrategy | undefined;
  try {
    // The ranks of this job (not those the pre-training ran on); DDP with the run's SyncBatchNorm setting.
    const strategyConfig = buildConfig({
      ...model.config,
      devices: wiring.worker?.worldSize ?? 1,
      gpus: undefined,
      numNodes: 1,
      strategy: 'auto',
      timeout: options.timeout ?? model.config.timeout,
    });
    selected = await registerRunStrategy(scope, strategyConfig, wiring.worker);
    const { group, strategy } = selected;
    const train = sampleDataset(model.experiment.train, options.trainSamples, options.seed + 1);
    const val = sampleDataset(validationSplit(model), options.valSamples, options.seed + 2);
    if (options.batchSize > train.length) throw invalidValue('--batch-size', options.batchSize, `at most the training images (${train.length})`);
    if (options.batchSize % group.worldSize !== 0) {
      throw invalidValue('--batch-size', options.batchSize, `a multiple of the world size ${group.worldSize} (each rank gets batch-size / world size)`);
    }
    const precomputed = !options.finetune && options.augmentation === 'none';
    const featureStart = Date.now();
    const features = (d: Dataset) =>
      shardedFeatures(
        d,
        (part) => (pixels ? pixelFeatures(part, model.transform, options.batchSize, model.onUnreadable) : backboneFeatures(model, part, options.batchSize)),
        group,
      );
    const [trainFeatures, valFeatures] = precomputed ? [await features(train), await features(val)] : [];
    const featureSec = precomputed ? (Date.now() - featureStart) / 1000 : 0;
    const featureDim = trainFeatures?.shape[1] ?? method.backbone.featureDim;
    const classifier = pixels ? new Linear(featureDim, train.numClasses, { rng: new Rng(options.seed) }) : method.classifier;
    let lock: RunLock | undefined;
    try {
      // The method is checkpointed whole; only the classifier (and, fine-tuning, the backbone) trains.
      for (const [name, v] of method.namedParameters()) v.trainable = name.startsWith('classifier.') || (options.finetune && name.startsWith('backbone.'));
      const evalModel: LinearEvalModel = {
        module: pixels ? classifier : method,
        logits: (inputs, training) => {
          if (precomputed) return classifier.forward(inputs);
          method.train(training && options.finetune);
          return classifier.forward(method.backbone.forward(inputs));
        },
      };
      const view = options.augmentation === 'crop-flip' ? supervisedView(train) : undefined;
      const [trainSet, valSet] = precomputed
        ? [featureSet(trainFeatures!, train.labels), featureSet(valFeatures!, val.labels)]
        : [
            imageSet(train, model.transform, view, options.seed, model.onUnreadable),
            imageSet(val, model.transform, undefined, options.seed, model.onUnreadable),
          ];

      const source = initConfig(init);
      const runDir =
        options.runDir ??
        join(
          'runs',
          `linear-${options.features.kind === 'pretrained' ? basename(resolve(options.features.source.path)) : options.features.kind}-${new Date().toISOString().replace(/[:.]/g, '-')}`,
        );
      const appliedLr = scaleLearningRate(options.lr, options.batchSize);
      const runConfig: Record<string, unknown> = {
        ...model.config,
        runDir,
        evaluation: 'linear',
        features: options.features.kind,
        pretrained: options.features.kind === 'pretrained' ? options.features.source.path : undefined,
        pretrainedCheckpoint: options.features.kind === 'pretrained' ? options.features.source.checkpointPath : undefined,
        pretrainedStep: options.features.kind === 'pretrained' ? options.features.source.step : undefined,
        pretrainedMethod: source.method,
        augmentation: options.augmentation,
        finetune: options.finetune,
        precomputedFeatures: precomputed,
        featureSec,
        epochs: options.epochs,
        batchSize: options.batchSize,
        globalBatch: options.batchSize,
        localBatch: options.batchSize / group.worldSize,
        worldSize: group.worldSize,
        dropLast: true,
        optimizer: 'sgd',
        lr: options.lr,
        appliedLr,
        scheduler: 'cosine',
        momentum: options.momentum,
        weightDecay: options.weightDecay,
        seed: options.seed,
        trainSize: train.length,
        valSize: val.length,
        featureDim,
        ...options.tracking,
      };
      const trainerOptions: TrainerOptions = {
        maxEpochs: options.epochs,
        logEvery: options.logEvery ?? 10,
        valEvery: 1,
        checkpointEvery: 0,
        checkpointEverySteps: options.checkpointEverySteps ?? linearStepsPerEpoch(train.length, options.batchSize),
        runDir,
        resume: options.resume,
        config: runConfig,
        print: options.print,
      };
      scope.registerInstance(TRAINER_OPTIONS, trainerOptions);
      const { tracking } = options;
      const wandb = tracking.logger === 'wandb' || tracking.wandbProject !== undefined;
      const wandbName = tracking.wandbName ?? `linear-${model.config.method}-${model.config.backbone}-${model.config.dataset}-seed${model.config.seed}`;
      const wandbTags = ['linear', ...(parseTags(tracking.wandbTags) ?? [])];
      const { wandbProject: project, wandbEntity: entity, wandbGroup, wandbMode: mode } = tracking;
      registerLoggers(scope, runDir, wandb ? { runDir, project, entity, name: wandbName, group: wandbGroup, tags: wandbTags, mode } : undefined);
      registerAround<Callback>(scope, CALLBACK, options.print ? [epochLines(options.epochs, options.print)] : []);
      const task = new LinearEvalTask(evalModel, valSet, {
        lr: appliedLr,
        momentum: options.momentum,
        weightDecay: options.weightDecay,
        evalBatchSize: options.batchSize,
      });
      // Its run directory is locked as a pre-training run's is (docs/training.md): never two writers.
      if (strategy.isGlobalZero) lock = acquireRunLock(runDir, { unlockHint: `delete ${runLockPath(runDir)}` });
      const fit = await scope.resolve(Trainer).fit(task, linearTrainingData(trainSet, options.batchSize, options.seed, group));
      const v = fit.validation;
      const final: LinearEpoch = { epoch: v.epoch, step: fit.progress.step, val: { top1: v['val/acc1'], top5: v['val/acc5'] }, valLoss: v['val/loss'] };
      return { runDir, history: strategy.isGlobalZero ? historyOf(runDir) : [], final, featureSec, wallTimeSec: fit.wallTimeSec };
    } finally {
      tf.dispose([trainFeatures, valFeatures].filter((t): t is Tensor => t !== undefined));
      if (pixels) classifier.dispose();
      lock?.release();
    }
  } finally {
    method.dispose();
    selected?.close();
  }
}

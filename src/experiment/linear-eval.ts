/**
 * `ssl-train linear`: offline linear evaluation of a backbone in its own run directory
 * (config.json, metrics.jsonl, summary.json, checkpoints/last.ckpt; W&B when asked), as
 * solo-learn's `main_linear.py`.
 */
import { NO_COLOR_OPS } from '../data/augment/recipes.js';
import { existsSync, mkdirSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { invalidValue, UserError } from '../core/errors.js';
import { Linear } from '../core/layers.js';
import { Rng } from '../core/random.js';
import { tf, type Tensor } from '../core/tf.js';
import { evalBatch, type EvalTransform, type ViewAugmentation } from '../data/augment/views.js';
import { normalizationFor, sampleDataset, type Dataset } from '../data/dataset.js';
import { augmentStoreBatch } from '../data/loader-batch.js';
import { PixelReader, pixelStore, type SkippedFile } from '../data/pixels.js';
import { fitLinearEval, type LabelledSet, type LinearEpoch, type LinearEvalModel } from '../eval/linear.js';
import { scaleLearningRate, toNamedParams } from '../optim/index.js';
import { saveCheckpoint, withPrefix } from '../trainer/checkpoint.js';
import { RunDirLogger, type Logger } from '../trainer/loggers.js';
import { runDirPaths } from '../trainer/run-dir.js';
import { parseTags, WandbLogger } from '../tracking/index.js';
import type { TrainConfig } from './config.js';
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
  /** Default `runs/linear-<source>-<timestamp>`; must not hold a run yet. */
  runDir?: string;
  epochs: number;
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
  tracking: TrackingOptions;
  /** One progress line per epoch (default: none). */
  print?: (line: string) => void;
}

/** A finished linear evaluation. */
export interface LinearRunResult {
  runDir: string;
  history: LinearEpoch[];
  /** Figures after the last epoch. */
  final: LinearEpoch;
  /** Seconds spent computing features before training (0 when they are not precomputed). */
  featureSec: number;
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

function loggersFor(runDir: string, config: TrainConfig, tracking: TrackingOptions): Logger[] {
  const loggers: Logger[] = [new RunDirLogger(runDir)];
  if (tracking.logger === 'wandb' || tracking.wandbProject !== undefined) {
    const { wandbProject: project, wandbEntity: entity, wandbGroup: group, wandbMode: mode } = tracking;
    const name = tracking.wandbName ?? `linear-${config.method}-${config.backbone}-${config.dataset}-seed${config.seed}`;
    loggers.push(new WandbLogger({ runDir, project, entity, name, group, tags: ['linear', ...(parseTags(tracking.wandbTags) ?? [])], mode }));
  }
  return loggers;
}

/** Refuses what cannot run, before anything is loaded or written. */
function checkOptions(options: LinearRunOptions): void {
  if (options.features.kind === 'pixels' && (options.finetune || options.augmentation !== 'none')) {
    throw new UserError('linear: raw-pixel features are precomputed: they take neither --finetune nor --augmentation crop-flip');
  }
  if (options.runDir !== undefined && existsSync(runDirPaths(options.runDir).config)) {
    throw invalidValue('--run-dir', options.runDir, 'a directory that holds no run yet (it has a config.json)');
  }
}

/**
 * Trains a linear classifier on the features (or, fine-tuning, the whole network) and
 * evaluates it on the test split after every epoch; logs to its own run directory. With
 * no augmentation and no fine-tuning the features are computed once (the fast path).
 */
export async function runLinearEval(options: LinearRunOptions): Promise<LinearRunResult> {
  checkOptions(options);
  const started = Date.now();
  const pixels = options.features.kind === 'pixels';
  const init: BackboneInit = options.features.kind === 'pixels' ? { kind: 'random-init', config: options.features.config } : options.features;
  const model = await prepareEvalModel(init, options.data, 'linear', requireLabels('linear'));
  const { method } = model;
  try {
    const train = sampleDataset(model.experiment.train, options.trainSamples, options.seed + 1);
    const val = sampleDataset(validationSplit(model), options.valSamples, options.seed + 2);
    if (options.batchSize > train.length) throw invalidValue('--batch-size', options.batchSize, `at most the training images (${train.length})`);
    const precomputed = !options.finetune && options.augmentation === 'none';
    const featureStart = Date.now();
    const features = (d: Dataset) =>
      pixels ? pixelFeatures(d, model.transform, options.batchSize, model.onUnreadable) : backboneFeatures(model, d, options.batchSize);
    const [trainFeatures, valFeatures] = precomputed ? [await features(train), await features(val)] : [];
    const featureSec = precomputed ? (Date.now() - featureStart) / 1000 : 0;
    const featureDim = trainFeatures?.shape[1] ?? method.backbone.featureDim;
    const classifier = pixels ? new Linear(featureDim, train.numClasses, { rng: new Rng(options.seed) }) : method.classifier;
    const evalModel: LinearEvalModel = {
      logits: (inputs, training) => {
        if (precomputed) return classifier.forward(inputs);
        method.train(training && options.finetune);
        return classifier.forward(method.backbone.forward(inputs));
      },
      trainableParameters: () =>
        toNamedParams([...(options.finetune ? method.backbone.namedParameters('backbone') : []), ...classifier.namedParameters('classifier')]),
    };
    const view = options.augmentation === 'crop-flip' ? supervisedView(train) : undefined;
    const [trainSet, valSet] = precomputed
      ? [featureSet(trainFeatures!, train.labels), featureSet(valFeatures!, val.labels)]
      : [imageSet(train, model.transform, view, options.seed, model.onUnreadable), imageSet(val, model.transform, undefined, options.seed, model.onUnreadable)];

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
      epochs: options.epochs,
      batchSize: options.batchSize,
      globalBatch: options.batchSize,
      worldSize: 1,
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
    mkdirSync(runDir, { recursive: true });
    const loggers = loggersFor(runDir, model.config, options.tracking);
    for (const logger of loggers) {
      logger.beginAt?.(0);
      logger.logHyperparams(runConfig);
    }
    let status: 'success' | 'failed' = 'failed';
    let history: LinearEpoch[] = [];
    let reason: string | undefined;
    try {
      history = await fitLinearEval(
        evalModel,
        trainSet,
        valSet,
        {
          epochs: options.epochs,
          batchSize: options.batchSize,
          lr: appliedLr,
          momentum: options.momentum,
          weightDecay: options.weightDecay,
          seed: options.seed,
        },
        (e) => {
          const metrics = {
            'train/loss': e.trainLoss,
            'train/acc1': e.trainAcc1,
            'train/lr': e.lr,
            'val/loss': e.valLoss,
            'val/acc1': e.val.top1,
            'val/acc5': e.val.top5,
            epoch: e.epoch,
          };
          for (const logger of loggers) logger.logMetrics(metrics, e.step);
          options.print?.(
            `linear: epoch ${e.epoch + 1}/${options.epochs}: loss ${e.trainLoss.toFixed(4)}, val top-1 ${(100 * e.val.top1).toFixed(2)}%, top-5 ${(100 * e.val.top5).toFixed(2)}%`,
          );
        },
      );
      status = 'success';
    } catch (e) {
      reason = (e as Error).message;
      throw e;
    } finally {
      const final = history[history.length - 1];
      const wallTimeSec = (Date.now() - started) / 1000;
      const summary: Record<string, number> = final
        ? {
            'val/acc1': final.val.top1,
            'val/acc5': final.val.top5,
            'val/best_acc1': Math.max(...history.map((h) => h.val.top1)),
            epoch: final.epoch,
            step: final.step,
          }
        : {};
      if (final && !pixels) {
        const meta = { format: 'ssl-zoo-checkpoint/1', progress: { epoch: options.epochs, step: final.step, batchInEpoch: 0 }, config: runConfig };
        mkdirSync(runDirPaths(runDir).checkpoints, { recursive: true });
        saveCheckpoint(runDirPaths(runDir).lastCheckpoint, { tensors: withPrefix(method.stateDict(), 'model/'), meta });
      }
      for (const logger of loggers) await logger.finalize(status, { ...summary, wall_time_sec: wallTimeSec, feature_sec: featureSec }, reason);
      tf.dispose([trainFeatures, valFeatures].filter((t): t is Tensor => t !== undefined));
      if (pixels) classifier.dispose();
    }
    const final = history[history.length - 1];
    return { runDir, history, final, featureSec, wallTimeSec: (Date.now() - started) / 1000 };
  } finally {
    method.dispose();
  }
}

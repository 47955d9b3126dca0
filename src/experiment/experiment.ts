/**
 * What a run is built from, resolved from its config without a process group: the data (an
 * in-memory dataset, or a streamed image folder), the method class with its arguments and
 * optimizer recipe, the crops and their views, and a factory for the method.
 */
import { createBackbone, VisionTransformer, type Backbone } from '../backbones/index.js';
import { invalidValue, UserError } from '../core/errors.js';
import { Rng } from '../core/random.js';
import { setGradCheckpointing } from '../core/transformer.js';
import { formatCrops, resolveCrops, type CropGroup } from '../data/augment/crops.js';
import { viewsFor } from '../data/augment/recipes.js';
import type { ViewAugmentation } from '../data/augment/views.js';
import type { Dataset, FolderDataset, ImageDataset } from '../data/dataset.js';
import { loadImageFolder } from '../data/folder.js';
import { MultiViewLoader } from '../data/loader.js';
import { RandomSampler, type Sampler } from '../data/sampler.js';
import { loadDataset } from '../data/load.js';
import type { BaseMethod, MethodArgs } from '../methods/base.js';
import { getMethodClass, resolveMethodArgs, type MethodClass } from '../methods/registry.js';
import type { OptimSettings } from '../methods/task.js';
import type { TrainConfig } from './config.js';

/** Everything a run is built from, resolved from a config (no process group involved). */
export interface Experiment<D extends Dataset = Dataset> {
  train: D;
  /** Validation images; undefined for an unlabelled folder (no validation). */
  test: D | undefined;
  methodClass: MethodClass;
  methodArgs: MethodArgs;
  cifarStem: boolean;
  /** The crop groups of {@link views}: `--crops`, or the method's default. */
  crops: CropGroup[];
  views: ViewAugmentation[];
  optim: Omit<OptimSettings, 'globalBatch'>;
  /** A new method instance; the same seed gives the same weights every time. */
  createMethod(): BaseMethod;
}

/** An experiment on an in-memory dataset (always with a test split). */
export type InMemoryExperiment = Experiment<ImageDataset> & { test: ImageDataset };

/**
 * A loader of `experiment`'s training views in this thread (no workers), whole batches only, for
 * what drives steps itself (`verify`, the engine check, tests): `batchSize` samples a batch
 * (default the config's global batch), drawn by `sampler` (default the config's seed's shuffle).
 */
export function inProcessLoader(
  experiment: Experiment,
  config: Pick<TrainConfig, 'seed' | 'batchSize'>,
  options: { batchSize?: number; sampler?: Sampler } = {},
): MultiViewLoader {
  const { batchSize = config.batchSize, sampler = new RandomSampler(experiment.train.length, config.seed) } = options;
  return new MultiViewLoader({ dataset: experiment.train, views: experiment.views, batchSize, sampler, seed: config.seed, dropLast: true, workers: 0 });
}

/** Default `--image-size`: synthetic images are generated at 28 px, folder images resized to 64 px. */
const DEFAULT_IMAGE_SIZE = { synthetic: 28, folder: 64 };

/** Loads an in-memory dataset (not `folder`: see {@link prepareFolderExperiment}) and resolves the method, its recipe defaults and augmentations. */
export function prepareExperiment(config: TrainConfig): InMemoryExperiment {
  const imageSize = config.imageSize ?? DEFAULT_IMAGE_SIZE.synthetic;
  const dataOptions = { dataDir: config.dataDir, seed: config.seed, size: config.syntheticSize, imageSize };
  const train = loadDataset(config.dataset, { ...dataOptions, split: 'train' });
  const test = loadDataset(config.dataset, { ...dataOptions, split: 'test', size: Math.max(16, Math.round(config.syntheticSize / 4)) });
  return { ...assembleExperiment(config, train, test), test };
}

/** The folder flags are refused with other datasets, and inconsistent folder flags. */
export function checkFolderFlags(config: TrainConfig): void {
  const folder = config.dataset === 'folder';
  if (!folder && config.unlabelled) throw invalidValue('--unlabelled', true, 'only with --dataset folder');
  if (!folder && config.valDir !== undefined) throw new UserError('--val-dir: only with --dataset folder');
  if (!folder && config.channels !== undefined) throw new UserError('--channels: only with --dataset folder (the other datasets have theirs)');
  if (folder && config.dataDir === undefined)
    throw new UserError('--data-dir: --dataset folder needs --data-dir DIR (DIR/<class>/*.jpg, or any image folder with --unlabelled)');
  if (config.unlabelled && config.valDir !== undefined) throw new UserError('--val-dir: not used with --unlabelled (no labels, no validation)');
}

/** The warning of a file skipped while a folder is listed or read. */
export function warnSkippedFile(path: string, reason: string): void {
  process.stderr.write(`ssl-train: warning: skipping ${path}: ${reason}\n`);
}

/**
 * Lists `--data-dir` (and `--val-dir`) as streamed folder datasets and resolves the rest as
 * {@link prepareExperiment}; `onSkip` hears of each file skipped by its name.
 */
export async function prepareFolderExperiment(config: TrainConfig, onSkip?: (path: string, reason: string) => void): Promise<Experiment<FolderDataset>> {
  checkFolderFlags(config);
  const { train, val } = await loadImageFolder({
    dir: config.dataDir!,
    valDir: config.valDir,
    valFraction: config.valFraction,
    unlabelled: config.unlabelled,
    imageSize: config.imageSize ?? DEFAULT_IMAGE_SIZE.folder,
    channels: config.channels,
    seed: config.seed,
    onSkip,
  });
  return assembleExperiment(config, train, val);
}

function assembleExperiment<D extends Dataset>(config: TrainConfig, train: D, test: D | undefined): Experiment<D> {
  const methodClass = getMethodClass(config.method);
  const methodArgs = resolveMethodArgs(config.method, config.methodArgs);
  const defaults = methodClass.optimDefaults;
  const imageSize = Math.min(train.height, train.width);
  const cifarStem = config.cifarStem ?? imageSize <= 64;
  const { crops, views } = resolveCrops(config.crops, methodClass.crops, config.method, viewsFor(methodClass.viewRecipe, train), imageSize);
  const smallestCrop = Math.min(...crops.map((g) => g.size));
  if (config.patchSize !== undefined && config.patchSize > smallestCrop) {
    throw invalidValue('--patch-size', config.patchSize, `at most the smallest crop, ${smallestCrop} px (--crops ${formatCrops(crops)})`);
  }
  return {
    train,
    test,
    methodClass,
    methodArgs,
    cifarStem,
    crops,
    views,
    optim: {
      optimizer: config.optimizer ?? defaults.optimizer,
      lr: config.lr ?? defaults.lr,
      classifierLr: config.classifierLr ?? defaults.classifierLr,
      weightDecay: config.weightDecay ?? defaults.weightDecay,
      momentum: config.momentum,
      larsEta: config.larsEta,
      larsClipLr: config.larsClipLr,
      warmupEpochs: config.warmupEpochs ?? config.epochs / 10,
      warmupStartLr: config.warmupStartLr,
      minLr: config.minLr,
      weightDecayEnd: config.weightDecayEnd,
    },
    createMethod: () => {
      const method = new methodClass({
        createBackbone: (r) =>
          checkCropSizes(
            createBackbone(config.backbone, {
              inChannels: train.channels,
              imageSize: train.height,
              cifarStem,
              rng: r,
              norm: config.norm,
              patchSize: config.patchSize,
            }),
            crops,
            config,
          ),
        numClasses: train.numClasses,
        datasetSize: train.length,
        rng: new Rng(config.seed),
        args: methodArgs,
        norm: config.norm,
      });
      if (config.gradCheckpointing && setGradCheckpointing(method, true) === 0) {
        method.dispose();
        throw invalidValue(
          '--grad-checkpointing',
          true,
          `a model with transformer blocks (a vit_* backbone), not method ${config.method} on ${config.backbone}`,
        );
      }
      return method;
    },
  };
}

/**
 * `backbone`, unless it takes one input size and some crops differ from it (the `mlp`), or
 * `--patch-size` was given for a backbone without patches: then a user error.
 */
function checkCropSizes(backbone: Backbone, crops: CropGroup[], { backbone: name, patchSize }: TrainConfig): Backbone {
  const size = backbone.inputSize;
  if (size !== undefined && crops.some((g) => g.size !== size)) {
    throw invalidValue(
      '--crops',
      formatCrops(crops),
      `crops of ${size} px only with --backbone ${name}, which takes ${size} x ${size} images (tiny_resnet, resnet18 and resnet50 pool globally, the ViTs resize their position embeddings: any crop size)`,
    );
  }
  if (patchSize !== undefined && !(backbone instanceof VisionTransformer)) {
    throw invalidValue('--patch-size', patchSize, `a Vision Transformer backbone (vit_tiny, vit_small), not ${name}`);
  }
  return backbone;
}

/**
 * What the offline evaluation commands (`linear`, `knn`, `embed`) share: the backbone to
 * evaluate (pre-trained, or freshly initialised as a baseline), the data it is evaluated
 * on (the run's dataset unless overridden: in memory, or an image folder read batch by
 * batch), and the features of a dataset.
 */
import { engineInfo, initEngine } from '../core/engine.js';
import { invalidValue, UserError } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';
import { evalTransform } from '../data/augment/recipes.js';
import type { EvalTransform } from '../data/augment/views.js';
import type { Dataset } from '../data/dataset.js';
import type { SkippedFile } from '../data/pixels.js';
import { extractDatasetFeatures } from '../eval/features.js';
import type { BaseMethod } from '../methods/base.js';
import { buildConfig, type TrainConfig } from './config.js';
import { checkFolderFlags, prepareExperiment, prepareFolderExperiment, warnSkippedFile, type Experiment } from './experiment.js';
import { loadPretrainedBackbone, type PretrainedSource } from './pretrained.js';

/**
 * The backbone an evaluation runs on: a pre-trained one, or the architecture of `config`
 * freshly initialised from its seed (the random-init baseline).
 */
export type BackboneInit = { kind: 'pretrained'; source: PretrainedSource } | { kind: 'random-init'; config: TrainConfig };

/**
 * Data options of an evaluation; unset ones are the pre-training run's, except that another
 * dataset does not inherit the run's `dataDir`, and another folder not its `valDir` and
 * `unlabelled` (they describe the run's folder; an unlabelled reading has no `valDir`).
 */
export interface EvalDataOptions {
  dataset?: string;
  dataDir?: string;
  /** Synthetic images: side in pixels; folder images: the side they are resized to. */
  imageSize?: number;
  /** Synthetic images: training set size. */
  syntheticSize?: number;
  backend?: TrainConfig['backend'];
  /** Folder: validation images in class subfolders. */
  valDir?: string;
  /** Folder: fraction of each class held out for validation (without `valDir`). */
  valFraction?: number;
  /** Folder: images without classes (no labels, no validation split). */
  unlabelled?: boolean;
  /** Folder: 1 or 3 channels. */
  channels?: number;
}

/** A backbone ready to evaluate, with the data it is evaluated on. */
export interface EvalModel {
  /** The pre-training configuration with the evaluation's data options. */
  config: TrainConfig;
  /** The data (`train`, and `test` unless the folder is unlabelled) and the method factory of `config`. */
  experiment: Experiment;
  /** The method whose backbone is evaluated (its classifier is freshly initialised); dispose it. */
  method: BaseMethod;
  /** The deterministic eval view of the images (the training split's normalisation). */
  transform: EvalTransform;
  /** Warns of a folder's file found unreadable while a batch was read (its slot shows the next readable file). */
  onUnreadable(file: SkippedFile): void;
}

/** The configuration whose architecture `init` holds. */
export function initConfig(init: BackboneInit): TrainConfig {
  return init.kind === 'pretrained' ? init.source.config : init.config;
}

/** The pre-training configuration `base` with the evaluation's data options (see {@link EvalDataOptions}). */
export function evalConfig(base: TrainConfig, data: EvalDataOptions): TrainConfig {
  const given = Object.fromEntries(Object.entries(data).filter(([, v]) => v !== undefined));
  const dataset = data.dataset ?? base.dataset;
  const sameData = dataset === base.dataset;
  const sameFolder = sameData && (data.dataDir ?? base.dataDir) === base.dataDir;
  const unlabelled = data.unlabelled ?? (sameFolder && base.unlabelled);
  return buildConfig({
    ...base,
    resume: undefined,
    runDir: undefined,
    dataDir: sameData ? base.dataDir : undefined,
    valDir: sameFolder && !unlabelled ? base.valDir : undefined,
    unlabelled,
    // A folder is decoded to the channels the backbone takes; the other datasets have theirs.
    channels: dataset === 'folder' ? base.channels : undefined,
    ...given,
  });
}

/**
 * Refuses, before any image is read, an unlabelled folder for `command` (kNN and linear
 * evaluation need labels).
 */
export function requireLabels(command: string): (config: TrainConfig) => void {
  return (config) => {
    if (config.dataset === 'folder' && config.unlabelled) {
      throw new UserError(
        `--unlabelled: ${command} needs labels and the folder ${config.dataDir} is read without them; give a folder of class subfolders (DIR/<class>/*.png)` +
          ' and no --unlabelled (--unlabelled false when the run was pre-trained on it unlabelled)',
      );
    }
  };
}

/** A folder evaluated by a pre-trained backbone must be decoded to the image size and channels it was trained on. */
function checkFolderShape(source: PretrainedSource, train: Dataset): void {
  const { imageSize, channels } = source.config;
  const trained = `the backbone of ${source.path} was trained on`;
  if (imageSize !== undefined && train.height !== imageSize) throw invalidValue('--image-size', train.height, `${imageSize}, the image size ${trained}`);
  if (channels !== undefined && train.channels !== channels) throw invalidValue('--channels', train.channels, `${channels}, the channels ${trained}`);
}

/**
 * Builds the method of `init`'s configuration for the evaluation data (its backbone must
 * take those images: a pre-trained one that does not is a user error naming `flag`, or the
 * folder flag that differs) and loads the pre-trained backbone weights. `check` sees the
 * configuration before any data is read (e.g. {@link requireLabels}). A folder is listed
 * (files skipped by name get a warning each, as in training), not read. Initialises the
 * tensor engine if needed.
 */
export async function prepareEvalModel(init: BackboneInit, data: EvalDataOptions, flag: string, check?: (config: TrainConfig) => void): Promise<EvalModel> {
  const config = evalConfig(initConfig(init), data);
  checkFolderFlags(config);
  check?.(config);
  if (!engineInfo()) await initEngine(config.backend);
  const experiment: Experiment = config.dataset === 'folder' ? await prepareFolderExperiment(config, warnSkippedFile) : prepareExperiment(config);
  if (init.kind === 'pretrained' && config.dataset === 'folder') checkFolderShape(init.source, experiment.train);
  const method = experiment.createMethod();
  try {
    if (init.kind === 'pretrained') loadPretrainedBackbone(method, init.source, flag);
  } catch (e) {
    method.dispose();
    throw e;
  }
  method.eval();
  let unreadable = 0;
  const onUnreadable = (file: SkippedFile): void => warnSkippedFile(file.path, `${file.reason} (unreadable files so far: ${++unreadable})`);
  return { config, experiment, method, transform: evalTransform(experiment.train), onUnreadable };
}

/**
 * The validation split of `model`'s data: the in-memory test set, or a labelled folder's
 * validation images (an unlabelled folder has none: refuse it first with {@link requireLabels}).
 */
export function validationSplit(model: EvalModel): Dataset {
  if (!model.experiment.test) throw new Error('an unlabelled folder has no validation split');
  return model.experiment.test;
}

/** `[N, F]` backbone features (eval mode, eval view) of every image of `dataset`, in order, read batch by batch; the caller disposes them. */
export async function backboneFeatures(model: EvalModel, dataset: Dataset, batchSize: number): Promise<Tensor> {
  model.method.eval();
  const { features, logits } = await extractDatasetFeatures(model.method, dataset, model.transform, batchSize, model.onUnreadable);
  logits.dispose();
  return features;
}

/** `[N, H * W * C]` the eval views of `dataset` flattened: the raw-pixel baseline's features. */
export async function pixelFeatures(
  dataset: Dataset,
  transform: EvalTransform,
  batchSize: number,
  onUnreadable?: (file: SkippedFile) => void,
): Promise<Tensor> {
  const flatten = {
    features: (images: Tensor) => tf.reshape(images, [images.shape[0], -1]),
    classifier: { forward: (f: Tensor) => tf.slice(f, [0, 0], [-1, 1]) },
  };
  const { features, logits } = await extractDatasetFeatures(flatten, dataset, transform, batchSize, onUnreadable);
  logits.dispose();
  return features;
}

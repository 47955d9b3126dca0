/**
 * What the offline evaluation commands (`linear`, `knn`, `embed`) share: the backbone to
 * evaluate (pre-trained, or freshly initialised as a baseline), the data it is evaluated
 * on (the run's dataset unless overridden), and the features of a dataset.
 */
import { engineInfo, initEngine } from '../core/engine.js';
import { tf, type Tensor } from '../core/tf.js';
import { evalTransform } from '../data/augment/recipes.js';
import type { EvalTransform } from '../data/augment/views.js';
import { type ImageDataset } from '../data/dataset.js';
import { extractFeatures } from '../eval/features.js';
import type { BaseMethod } from '../methods/base.js';
import { buildConfig, type TrainConfig } from './config.js';
import { loadPretrainedBackbone, type PretrainedSource } from './pretrained.js';
import { prepareExperiment, type InMemoryExperiment } from './train.js';

/**
 * The backbone an evaluation runs on: a pre-trained one, or the architecture of `config`
 * freshly initialised from its seed (the random-init baseline).
 */
export type BackboneInit = { kind: 'pretrained'; source: PretrainedSource } | { kind: 'random-init'; config: TrainConfig };

/** Data options of an evaluation; unset ones are the pre-training run's. */
export interface EvalDataOptions {
  dataset?: string;
  dataDir?: string;
  /** Synthetic images: side in pixels. */
  imageSize?: number;
  /** Synthetic images: training set size. */
  syntheticSize?: number;
  backend?: TrainConfig['backend'];
}

/** A backbone ready to evaluate, with the data it is evaluated on. */
export interface EvalModel {
  /** The pre-training configuration with the evaluation's data options. */
  config: TrainConfig;
  /** The data (`train`, `test`) and the method factory of `config`. */
  experiment: InMemoryExperiment;
  /** The method whose backbone is evaluated (its classifier is freshly initialised); dispose it. */
  method: BaseMethod;
  /** The deterministic eval view of the images (the training split's normalisation). */
  transform: EvalTransform;
}

/** The configuration whose architecture `init` holds. */
export function initConfig(init: BackboneInit): TrainConfig {
  return init.kind === 'pretrained' ? init.source.config : init.config;
}

/**
 * Builds the method of `init`'s configuration for the evaluation data (its backbone must
 * take those images: a pre-trained one that does not is a user error naming `flag`) and
 * loads the pre-trained backbone weights. Initialises the tensor engine if needed.
 */
export async function prepareEvalModel(init: BackboneInit, data: EvalDataOptions, flag: string): Promise<EvalModel> {
  const base = initConfig(init);
  const overrides = Object.fromEntries(Object.entries(data).filter(([, v]) => v !== undefined));
  const config = buildConfig({ ...base, resume: undefined, runDir: undefined, ...overrides });
  if (!engineInfo()) await initEngine(config.backend);
  const experiment = prepareExperiment(config);
  const method = experiment.createMethod();
  try {
    if (init.kind === 'pretrained') loadPretrainedBackbone(method, init.source, flag);
  } catch (e) {
    method.dispose();
    throw e;
  }
  method.eval();
  return { config, experiment, method, transform: evalTransform(experiment.train) };
}

/** `[N, F]` backbone features (eval mode, eval view) of every image of `dataset`, in order; the caller disposes them. */
export function backboneFeatures(model: EvalModel, dataset: ImageDataset, batchSize: number): Tensor {
  model.method.eval();
  const { features, logits } = extractFeatures(model.method, dataset, model.transform, batchSize);
  logits.dispose();
  return features;
}

/** `[N, H * W * C]` the eval views of `dataset` flattened: the raw-pixel baseline's features. */
export function pixelFeatures(dataset: ImageDataset, transform: EvalTransform, batchSize: number): Tensor {
  const flatten = {
    features: (images: Tensor) => tf.reshape(images, [images.shape[0], -1]),
    classifier: { forward: (f: Tensor) => tf.slice(f, [0, 0], [-1, 1]) },
  };
  const { features, logits } = extractFeatures(flatten, dataset, transform, batchSize);
  logits.dispose();
  return features;
}

/**
 * `ssl-train knn` and `ssl-train embed`: a backbone's features of a data set, classified
 * by weighted kNN (a sweep of settings in one pass) or written as NumPy arrays.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { invalidValue } from '../core/errors.js';
import { encodeNpy } from '../core/npy.js';
import { tf } from '../core/tf.js';
import { isInMemory, sampleDataset } from '../data/dataset.js';
import { knnSweep, type KnnDistance, type KnnSweepResult } from '../eval/knn.js';
import { writeFileAtomic } from '../trainer/files.js';
import type { TrainConfig } from './config.js';
import { backboneFeatures, prepareEvalModel, requireLabels, validationSplit, type BackboneInit, type EvalDataOptions } from './eval-model.js';

/** Options of {@link runKnnEval}. */
export interface KnnRunOptions {
  init: BackboneInit;
  data: EvalDataOptions;
  ks: number[];
  temperatures: number[];
  distances: KnnDistance[];
  /** Training images in the kNN memory (0: all). */
  trainSamples: number;
  /** Test images classified (0: all). */
  valSamples: number;
  /** Images per forward pass. */
  batchSize: number;
  seed: number;
}

/**
 * Weighted kNN of the test split (a folder's validation images) against the training split
 * (features computed once) for every combination of `ks`, `temperatures` and `distances`
 * (see {@link knnSweep}). An unlabelled folder is a user error.
 */
export async function runKnnEval(options: KnnRunOptions): Promise<KnnSweepResult[]> {
  const model = await prepareEvalModel(options.init, options.data, 'knn', requireLabels('knn'));
  try {
    const memory = sampleDataset(model.experiment.train, options.trainSamples, options.seed + 1);
    const test = sampleDataset(validationSplit(model), options.valSamples, options.seed + 2);
    const memoryFeatures = await backboneFeatures(model, memory, options.batchSize);
    const testFeatures = await backboneFeatures(model, test, options.batchSize);
    try {
      return knnSweep(memoryFeatures, memory.labels, testFeatures, test.labels, {
        ks: options.ks,
        temperatures: options.temperatures,
        distances: options.distances,
        numClasses: memory.numClasses,
      });
    } finally {
      tf.dispose([memoryFeatures, testFeatures]);
    }
  } finally {
    model.method.dispose();
  }
}

/** The dataset splits `embed` can write. */
export const EMBED_SPLITS = ['train', 'test'] as const;

/** Options of {@link runEmbed}. */
export interface EmbedOptions {
  init: BackboneInit;
  data: EvalDataOptions;
  /** Default `test`; `train` for an unlabelled folder (all its images: it has no other split). */
  split?: (typeof EMBED_SPLITS)[number];
  /** The `.npy` file of the features. */
  out: string;
  /** Images per forward pass. */
  batchSize: number;
}

/** What {@link runEmbed} wrote. */
export interface EmbedResult {
  features: string;
  /** `[N]` int32 labels beside the features (`<out>.labels.npy`), when the split has labels (not an unlabelled folder). */
  labels?: string;
  /** `[N, F]` */
  shape: [number, number];
}

/** `features.npy` -> `features.labels.npy`. */
export function labelsPathFor(out: string): string {
  return out.replace(/\.npy$/, '.labels.npy');
}

/** Refuses an output path that cannot be written, before any work. */
export function checkEmbedOut(out: string): void {
  if (!out.endsWith('.npy')) throw invalidValue('--out', out, 'a file name ending in .npy');
  const dir = dirname(out);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw invalidValue('--out', out, `a path in an existing directory (${dir} does not exist)`);
  if (existsSync(out) && statSync(out).isDirectory()) throw invalidValue('--out', out, 'a file (it is a directory)');
}

/** An unlabelled folder has one split, `train` (all its images); asking for `test` is a user error. */
function checkEmbedSplit(split: EmbedOptions['split']): (config: TrainConfig) => void {
  return (config) => {
    if (config.dataset === 'folder' && config.unlabelled && split === 'test') {
      throw invalidValue('--split', split, 'train with --unlabelled (an unlabelled folder has no validation split: all its images are the train split)');
    }
  };
}

/**
 * Writes the backbone features (eval mode, eval view) of a split as a float32 `[N, F]`
 * `.npy` file and, unless the split is an unlabelled folder, its labels as an int32 `[N]`
 * one beside it, each atomically. A folder is read batch by batch.
 */
export async function runEmbed(options: EmbedOptions): Promise<EmbedResult> {
  checkEmbedOut(options.out);
  const model = await prepareEvalModel(options.init, options.data, 'embed', checkEmbedSplit(options.split));
  try {
    const split = options.split ?? (model.experiment.test ? 'test' : 'train');
    const dataset = split === 'train' ? model.experiment.train : validationSplit(model);
    const features = await backboneFeatures(model, dataset, options.batchSize);
    const shape: [number, number] = [features.shape[0], features.shape[1] ?? 1];
    const values = features.dataSync() as Float32Array;
    features.dispose();
    writeFileAtomic(options.out, [encodeNpy(values, shape)]);
    if (!isInMemory(dataset) && !dataset.labelled) return { features: options.out, shape };
    const labels = labelsPathFor(options.out);
    writeFileAtomic(labels, [encodeNpy(dataset.labels, [dataset.labels.length])]);
    return { features: options.out, labels, shape };
  } finally {
    model.method.dispose();
  }
}

import { existsSync } from 'node:fs';
import { UMAP } from 'umap-js';
import { trainConfigFromResolved } from '../experiment/pretrained.js';
import { prepareExperiment } from '../experiment/experiment.js';
import { engineInfo, initEngine } from '../core/engine.js';
import { UserError } from '../core/errors.js';
import { Rng } from '../core/random.js';
import { l2NormalizeRows } from '../core/ops.js';
import { tf } from '../core/tf.js';
import { evalTransform } from '../data/augment/recipes.js';
import { sampleDataset } from '../data/dataset.js';
import { extractFeatures } from '../eval/features.js';
import { loadCheckpoint, withoutPrefix } from '../trainer/checkpoint.js';
import { runDirPaths } from '../trainer/run-dir.js';
import type { ReportRun } from './run-data.js';

/** A 2-D map of validation features. */
export interface Embedding {
  /** One point per validation image: UMAP coordinates and class index. */
  points: Array<{ x: number; y: number; label: number }>;
  /** [numClasses] */
  classNames: string[];
  /** Optimizer step of the checkpoint the features come from. */
  step: number;
  /** The run's last kNN top-1 accuracy (for the caption), if it validated. */
  knnAcc1?: number;
}

/** Options of {@link computeEmbedding}. */
export interface EmbeddingOptions {
  /** At most this many validation images (a seeded sample of the validation split). */
  points: number;
  /** Seeds the sample and UMAP (default 0). */
  seed?: number;
}

/**
 * The UMAP map of a run's final representation: rebuilds the method from the run's
 * `config.json` (same data, backbone and heads), loads `checkpoints/last.ckpt`, extracts
 * backbone features (eval mode, deterministic eval transform) of up to `points` validation
 * images, L2-normalises them (kNN compares cosine similarities) and embeds them in 2-D
 * with a seeded UMAP. Failures (no checkpoint, data gone, unknown method) are user errors.
 */
export async function computeEmbedding(run: ReportRun, options: EmbeddingOptions): Promise<Embedding> {
  const checkpointPath = runDirPaths(run.dir).lastCheckpoint;
  if (!existsSync(checkpointPath)) throw new UserError(`no checkpoints/last.ckpt (the run did not finish)`);
  const config = trainConfigFromResolved(run.config, `${runDirPaths(run.dir).config}`);
  if (!engineInfo()) await initEngine(config.backend === 'cpu-js' ? 'cpu-js' : 'auto');
  const experiment = prepareExperiment(config);
  const seed = options.seed ?? 0;
  const test = experiment.test;
  const val = sampleDataset(test, options.points, seed + 11);
  const method = experiment.createMethod();
  let step: number;
  let features: Float32Array;
  let dim: number;
  try {
    const checkpoint = loadCheckpoint(checkpointPath);
    try {
      method.loadStateDict(withoutPrefix(checkpoint.tensors, 'model/'));
      step = (checkpoint.meta.progress as { step?: number } | undefined)?.step ?? 0;
    } finally {
      tf.dispose(Object.values(checkpoint.tensors));
    }
    method.eval();
    const extracted = extractFeatures(method, val, evalTransform(experiment.train), 128);
    const normalised = tf.tidy(() => l2NormalizeRows(extracted.features));
    dim = extracted.features.shape[1] ?? 1;
    features = normalised.dataSync() as Float32Array;
    tf.dispose([extracted.features, extracted.logits, normalised]);
  } finally {
    method.dispose();
  }
  const n = val.length;
  const rows = Array.from({ length: n }, (_, i) => Array.from(features.subarray(i * dim, (i + 1) * dim)));
  const rng = new Rng(seed);
  const umap = new UMAP({ nComponents: 2, nNeighbors: Math.max(2, Math.min(15, n - 1)), minDist: 0.1, random: () => rng.uniform() });
  const coords = umap.fit(rows);
  const knn = [...run.rows].reverse().find((r) => Number.isFinite(r.values['val/knn_acc1']))?.values['val/knn_acc1'];
  return {
    points: coords.map(([x, y], i) => ({ x, y, label: val.labels[i] })),
    classNames: [...val.classNames],
    step,
    knnAcc1: knn,
  };
}

import { tf, type Tensor } from '../core/tf.js';
import { evalBatch, validateEvalTransform, type EvalTransform, type PixelSource } from '../data/augment/views.js';
import type { Dataset, ImageDataset } from '../data/dataset.js';
import { PixelReader, pixelStore, type SkippedFile } from '../data/pixels.js';

/** Features and classifier logits of a whole dataset. */
export interface ExtractedFeatures {
  /** `[N, F]` backbone features. */
  features: Tensor;
  /** `[N, K]` logits of the online classifier. */
  logits: Tensor;
  /** `[N]` labels. */
  labels: Int32Array;
}

/** A model that maps images `[B, S, S, C]` to features `[B, F]` and logits `[B, K]`. */
export interface FeatureModel {
  features(images: Tensor): Tensor;
  readonly classifier: { forward(features: Tensor): Tensor };
}

/** Features and logits of `n` images: row `rows[i]` of `source.pixels` ([R, h, w, c] bytes) is image i. */
function extractBatch(model: FeatureModel, source: PixelSource, rows: ArrayLike<number>, transform: EvalTransform): [Tensor, Tensor] {
  const S = transform.cropSize;
  const images = evalBatch(source, transform, rows);
  return tf.tidy(() => {
    const f = model.features(tf.tensor4d(images, [rows.length, S, S, source.channels]));
    return [f, model.classifier.forward(f)];
  });
}

function concatParts(featureParts: Tensor[], logitParts: Tensor[], labels: Int32Array): ExtractedFeatures {
  const features = tf.concat(featureParts, 0);
  const logits = tf.concat(logitParts, 0);
  tf.dispose([...featureParts, ...logitParts]);
  return { features, logits, labels };
}

/**
 * Runs `model` (put it in eval mode first) over an in-memory `dataset` in fixed order with
 * the deterministic eval transform (checked first: a user error names the bad field), in
 * batches of `batchSize`.
 */
export function extractFeatures(model: FeatureModel, dataset: ImageDataset, transform: EvalTransform, batchSize: number): ExtractedFeatures {
  validateEvalTransform(transform, dataset.channels, 'transform');
  const featureParts: Tensor[] = [];
  const logitParts: Tensor[] = [];
  for (let start = 0; start < dataset.length; start += batchSize) {
    const rows = Int32Array.from({ length: Math.min(batchSize, dataset.length - start) }, (_, i) => start + i);
    const [f, l] = extractBatch(model, dataset, rows, transform);
    featureParts.push(f);
    logitParts.push(l);
  }
  return concatParts(featureParts, logitParts, dataset.labels);
}

/**
 * {@link extractFeatures} for a dataset of either kind: a folder's images are decoded batch
 * by batch (only `batchSize` images in memory at a time). An unreadable file shows the next
 * readable one (see `PixelReader`), under its own label; `onUnreadable` hears of it once.
 */
export async function extractDatasetFeatures(
  model: FeatureModel,
  dataset: Dataset,
  transform: EvalTransform,
  batchSize: number,
  onUnreadable?: (file: SkippedFile) => void,
): Promise<ExtractedFeatures> {
  validateEvalTransform(transform, dataset.channels, 'transform');
  const reader = new PixelReader(pixelStore(dataset));
  const { height, width, channels } = dataset;
  const featureParts: Tensor[] = [];
  const logitParts: Tensor[] = [];
  for (let start = 0; start < dataset.length; start += batchSize) {
    const indices = Int32Array.from({ length: Math.min(batchSize, dataset.length - start) }, (_, i) => start + i);
    const batch = await reader.read(indices);
    if (onUnreadable) batch.skipped.forEach(onUnreadable);
    const [f, l] = extractBatch(model, { pixels: batch.pixels, height, width, channels }, batch.rows, transform);
    featureParts.push(f);
    logitParts.push(l);
  }
  return concatParts(featureParts, logitParts, dataset.labels);
}

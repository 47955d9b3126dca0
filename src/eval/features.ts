import { tf, type Tensor } from '../core/tf.js';
import { evalViewInto, validateEvalTransform, type EvalTransform } from '../data/augment/views.js';
import type { ImageDataset } from '../data/dataset.js';

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

/**
 * Runs `model` (put it in eval mode first) over `dataset` in fixed order with the
 * deterministic eval transform (checked first: a user error names the bad field), in
 * batches of `batchSize`.
 */
export function extractFeatures(model: FeatureModel, dataset: ImageDataset, transform: EvalTransform, batchSize: number): ExtractedFeatures {
  const { height: h, width: w, channels: c, length } = dataset;
  validateEvalTransform(transform, c, 'transform');
  const S = transform.cropSize;
  const imageSize = h * w * c;
  const featureParts: Tensor[] = [];
  const logitParts: Tensor[] = [];
  for (let start = 0; start < length; start += batchSize) {
    const n = Math.min(batchSize, length - start);
    const images = new Float32Array(n * S * S * c);
    for (let i = 0; i < n; i++) {
      evalViewInto(dataset.pixels, (start + i) * imageSize, h, w, c, transform, images, i * S * S * c);
    }
    const [features, logits] = tf.tidy(() => {
      const f = model.features(tf.tensor4d(images, [n, S, S, c]));
      return [f, model.classifier.forward(f)];
    });
    featureParts.push(features);
    logitParts.push(logits);
  }
  const features = tf.concat(featureParts, 0);
  const logits = tf.concat(logitParts, 0);
  tf.dispose([...featureParts, ...logitParts]);
  return { features, logits, labels: dataset.labels };
}

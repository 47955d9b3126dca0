import { detach } from '../core/ops.js';
import { tf, type Scalar, type Tensor, type Variable } from '../core/tf.js';
import { accuracy, crossEntropy, embeddingStd, type BaseMethod } from './base.js';

/** Gradients (keyed by variable name, this rank only) and metrics of one batch. */
export interface BatchGradients {
  grads: Record<string, Tensor>;
  metrics: Record<string, number>;
}

/** `[start, size]` of each chunk of a batch of `batch` rows (the last may be smaller). */
export function chunkRanges(batch: number, chunk: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let start = 0; start < batch; start += chunk) out.push([start, Math.min(chunk, batch - start)]);
  return out;
}

/**
 * The gradient cache (Gao et al. 2021; DESIGN.md contract 6): the gradients of
 * `method`'s training loss on `views` (`[B, H, W, C]` each) and `labels` (`[B]`) for
 * `variables`, with the backbone and heads run on `chunk` samples at a time, so that
 * activation memory follows the chunk, not the batch:
 *
 * 1. every chunk is forwarded without a gradient tape, keeping only its embeddings;
 * 2. the loss (which gathers across ranks inside, as always) and its gradient with
 *    respect to the local embeddings `[B, D]` are computed once;
 * 3. every chunk is forwarded again under a tape and the cached embedding gradient is
 *    back-propagated (a vector-Jacobian product: the gradient of Σ embeddings · cached
 *    gradient), the online classifier's cross-entropy added per chunk; parameter
 *    gradients are summed over chunks on this rank.
 *
 * The caller syncs the result once (one DDP gradient all-reduce per optimizer step). It
 * equals the unchunked gradient exactly when each embedding row depends on its own sample
 * only — not with batch norm in training mode, which couples the batch (refused unless the
 * user accepts the approximation). The views are materialised before the first pass, so
 * both passes see the same augmentations; ssl-zoo's models have no dropout.
 */
export function gradCacheGradients(method: BaseMethod, views: Tensor[], labels: Tensor, chunk: number, variables: Variable[]): BatchGradients {
  const batch = views[0].shape[0];
  const ranges = chunkRanges(batch, chunk);
  const sliceViews = (start: number, size: number) => views.map((v) => tf.slice(v, start, size));

  // 1. Embeddings of every chunk, no tape.
  const parts = ranges.map(([start, size]) =>
    tf.tidy(() => {
      const chunkViews = sliceViews(start, size);
      return method.embed(chunkViews.map((v) => method.features(v)), chunkViews);
    }),
  );
  const embeddings = parts[0].map((_, k) => tf.concat(parts.map((p) => p[k]), 0));
  tf.dispose(parts);

  // 2. The loss and its gradient with respect to the embeddings.
  const terms: Record<string, number> = {};
  const { value, grads: embeddingGrads } = tf.valueAndGrads((...inputs: Tensor[]) => {
    const out = method.embeddingLoss(inputs);
    for (const [name, t] of Object.entries(out.terms ?? {})) terms[name] = t.dataSync()[0];
    return out.loss;
  })(embeddings);
  const metrics: Record<string, number> = { loss: value.dataSync()[0], ...terms };
  metrics.embedding_std = tf.tidy(() => embeddingStd(embeddings[0]).dataSync()[0]);
  value.dispose();
  tf.dispose(embeddings);

  // 3. Re-forward each chunk under a tape and back-propagate the cached gradient.
  const total: Record<string, Tensor> = {};
  const samples = views.length * batch;
  let classLoss = 0;
  let top1 = 0;
  let top5 = 0;
  for (const [start, size] of ranges) {
    const chunkStats = { ce: 0, top1: 0, top5: 0 };
    const { value: surrogate, grads } = tf.variableGrads(() => {
      const chunkViews = sliceViews(start, size);
      const features = chunkViews.map((v) => method.features(v));
      const chunkEmbeddings = method.embed(features, chunkViews);
      let objective = tf.scalar(0);
      chunkEmbeddings.forEach((e, k) => {
        objective = tf.add(objective, tf.sum(tf.mul(e, tf.slice(embeddingGrads[k], start, size))));
      });
      const logits = method.classifier.forward(detach(tf.concat(features, 0)));
      const chunkLabels = tf.tile(tf.slice(labels, start, size), [views.length]);
      const ce = crossEntropy(logits, chunkLabels);
      const { top1: a1, top5: a5 } = accuracy(logits, chunkLabels);
      const weight = (views.length * size) / samples;
      chunkStats.ce = ce.dataSync()[0] * weight;
      chunkStats.top1 = a1.dataSync()[0] * weight;
      chunkStats.top5 = a5.dataSync()[0] * weight;
      return tf.add(objective, tf.mul(ce, weight)) as Scalar;
    }, variables);
    surrogate.dispose();
    classLoss += chunkStats.ce;
    top1 += chunkStats.top1;
    top5 += chunkStats.top5;
    for (const [name, g] of Object.entries(grads)) {
      const previous = total[name];
      total[name] = previous ? tf.add(previous, g) : g;
      if (previous) tf.dispose([previous, g]);
    }
  }
  tf.dispose(embeddingGrads);
  return { grads: total, metrics: { ...metrics, class_loss: classLoss, acc1: top1, acc5: top5 } };
}

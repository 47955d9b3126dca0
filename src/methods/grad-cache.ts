import { withoutGradientTape } from '../core/layers.js';
import { addInto } from '../core/ops.js';
import { tf, type Scalar, type Tensor, type Variable } from '../core/tf.js';
import { embeddingStd, type BaseMethod } from './base.js';

/** Gradients (keyed by variable name, this rank only) and metrics of one batch. */
export interface BatchGradients {
  grads: Record<string, Tensor>;
  /** Scalars `[]` left on the device (nothing is read inside a step); the caller disposes them. */
  metrics: Record<string, Scalar>;
}

/** `[start, size]` of each chunk of a batch of `batch` rows (the last may be smaller). */
export function chunkRanges(batch: number, chunk: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let start = 0; start < batch; start += chunk) out.push([start, Math.min(chunk, batch - start)]);
  return out;
}

/**
 * The gradient cache (Gao et al. 2021; docs/design.md contract 6): the gradients of
 * `method`'s training loss on `views` (`[B, H, W, C]` each), `labels` and dataset `indices` (`[B]`) for
 * `variables`, with the backbone and heads run on `chunk` samples at a time, so that
 * activation memory follows the chunk, not the batch:
 *
 * 1. every chunk but the last is forwarded without a gradient tape, keeping only its
 *    embeddings; the last is forwarded under the tape, which it keeps;
 * 2. the loss (which gathers across ranks inside, as always) and its gradient with
 *    respect to the local embeddings `[B, D]` are computed once, off that tape;
 * 3. the cached embedding gradient is back-propagated through each chunk (a
 *    vector-Jacobian product: the gradient of Σ embeddings · cached gradient), the online
 *    classifier's cross-entropy added per chunk: first through the last chunk's kept
 *    graph, then through every other chunk forwarded again under a tape. Parameter
 *    gradients are summed over chunks on this rank.
 *
 * So a batch of n chunks costs 2n - 1 chunk forwards, and a batch of one chunk is an
 * ordinary step. The caller syncs the result once (one DDP gradient all-reduce per
 * optimizer step). It equals the unchunked gradient exactly when each embedding row
 * depends on its own sample only — not with batch norm in training mode, which couples the
 * batch (refused unless the user accepts the approximation). The views are materialised
 * before the first pass, so both passes see the same augmentations; ssl-zoo's models have
 * no dropout.
 */
export function gradCacheGradients(
  method: BaseMethod,
  views: Tensor[],
  labels: Tensor,
  chunk: number,
  variables: Variable[],
  indices?: Int32Array,
): BatchGradients {
  const batch = views[0].shape[0];
  const ranges = chunkRanges(batch, chunk);
  const lastRange = ranges[ranges.length - 1];
  const embedChunk = ([start, size]: [number, number]) => {
    const chunkViews = views.map((v) => tf.slice(v, start, size));
    const features = method.viewFeatures(chunkViews);
    return { features, embeddings: method.embed(features, chunkViews) };
  };

  // 1. Embeddings of every chunk but the last, no tape.
  const cached = ranges.slice(0, -1).map((range) => tf.tidy(() => embedChunk(range).embeddings));

  // 2. The loss and its gradient with respect to all local embeddings, given the last chunk's.
  let embeddingGrads: Tensor[] = [];
  // Kept (tf.keep): they are made inside the tapes' scopes and outlive them.
  const metrics: Record<string, Scalar> = {};
  const lossGradients = (lastEmbeddings: Tensor[]): void => {
    const embeddings = lastEmbeddings.map((e, k) => tf.concat([...cached.map((c) => c[k]), e], 0));
    const { value, grads } = tf.valueAndGrads((...inputs: Tensor[]) => {
      const out = method.coupledLoss(inputs, labels, indices);
      for (const [name, t] of Object.entries(out.terms ?? {})) metrics[name] = tf.keep(tf.clone(t));
      // An embedding the loss does not differentiate (SwAV's projections, only queued) gets a
      // zero gradient instead of tfjs's "no path from x to y" error: loss + 0 · Σ e adds exactly 0.
      return tf.add(out.loss, tf.addN(inputs.map((e) => tf.mul(tf.sum(e), 0)))) as Scalar;
    })(embeddings);
    metrics.loss = tf.keep(value);
    metrics.embedding_std = tf.keep(tf.tidy(() => embeddingStd(embeddings[0])));
    tf.dispose([...embeddings, ...cached.flat()]);
    embeddingGrads = grads.map((g) => tf.keep(g)); // outlives the last chunk's tape scope
  };

  // 3. Back-propagate the cached gradient through each chunk, the last one first.
  const total: Record<string, Tensor> = {};
  const samples = views.length * batch;
  // The online classifier's terms, means over the batch's samples (each chunk weighted by its share): scalars `[]`.
  const classifier: Record<string, Scalar> = {};
  const backward = (range: [number, number], isLast: boolean) => {
    const [start, size] = range;
    const { value, grads } = tf.variableGrads(() => {
      const { features, embeddings } = embedChunk(range);
      if (isLast) withoutGradientTape(() => lossGradients(embeddings));
      let objective = tf.scalar(0);
      embeddings.forEach((e, k) => {
        objective = tf.add(objective, tf.sum(tf.mul(e, tf.slice(embeddingGrads[k], start, size))));
      });
      const terms = method.classifierTerms(features, tf.slice(labels, start, size));
      const weight = (views.length * size) / samples;
      for (const name of ['class_loss', 'acc1', 'acc5'] as const) {
        const previous = classifier[name];
        const weighted = tf.mul(terms[name], weight) as Scalar;
        classifier[name] = tf.keep(previous ? (tf.add(previous, weighted) as Scalar) : weighted);
        previous?.dispose();
      }
      return tf.add(objective, tf.mul(terms.class_loss, weight)) as Scalar;
    }, variables);
    value.dispose();
    addInto(total, grads);
  };
  backward(lastRange, true);
  for (const range of ranges.slice(0, -1)) backward(range, false);
  tf.dispose(embeddingGrads);
  return { grads: total, metrics: { ...metrics, ...classifier } };
}

/**
 * Small tensor helpers shared by the losses. Pure functions of tensors; they create no
 * tf.tidy scope of their own, so call them inside the caller's tidy.
 */
import { invalidValue } from '../core/errors.js';
import { l2NormalizeRows } from '../core/ops.js';
import { tf } from '../core/tf.js';

export { l2NormalizeRows };

/** Cosine similarity of matching rows: `[B, D], [B, D] -> [B]`. */
export function rowCosine(a: tf.Tensor2D, b: tf.Tensor2D): tf.Tensor1D {
  return tf.sum(tf.mul(l2NormalizeRows(a), l2NormalizeRows(b)), 1);
}

/** The diagonal of a square matrix: `[D, D] -> [D]` (exact gradient: zero off the diagonal). */
export function diagonal(c: tf.Tensor2D): tf.Tensor1D {
  return tf.sum(tf.mul(c, tf.eye(c.shape[0])), 1);
}

/**
 * Σ_{i≠j} c_ij² of a square matrix `[D, D] -> []`, or of each of K of them `[K, D, D] -> [K]`
 * (masked, not Σc² − Σc_ii², to avoid cancellation).
 */
export function offDiagonalSumOfSquares(c: tf.Tensor2D): tf.Scalar;
export function offDiagonalSumOfSquares(c: tf.Tensor3D): tf.Tensor1D;
export function offDiagonalSumOfSquares(c: tf.Tensor2D | tf.Tensor3D): tf.Tensor {
  const d = c.shape[c.rank - 1]!;
  const offMask = tf.sub(tf.ones([d, d]), tf.eye(d));
  return tf.sum(tf.square(tf.mul(c, offMask)), [c.rank - 2, c.rank - 1]);
}

/** Checks that two embedding batches are `[B, D]` with the same shape and B ≥ `minRows`. */
export function checkPair(fn: string, names: [string, string], a: tf.Tensor, b: tf.Tensor, minRows = 1): void {
  for (const [name, t] of [
    [names[0], a],
    [names[1], b],
  ] as const) {
    if (t.rank !== 2) throw new Error(`${fn}: ${name} must be [B, D], got shape [${t.shape.join(', ')}]`);
    if (t.shape[0] < minRows) throw new Error(`${fn}: ${name} needs at least ${minRows} row(s), got ${t.shape[0]}`);
    if (t.dtype !== 'float32') throw new Error(`${fn}: ${name} must be float32, got ${t.dtype}`);
  }
  if (a.shape[0] !== b.shape[0] || a.shape[1] !== b.shape[1]) {
    throw new Error(`${fn}: ${names[0]} [${a.shape.join(', ')}] and ${names[1]} [${b.shape.join(', ')}] must have the same shape`);
  }
}

/** Checks that a loss hyper-parameter (`field`, e.g. `temperature`) is a finite number > 0. */
export function checkPositive(field: string, value: number): void {
  if (!(typeof value === 'number' && Number.isFinite(value) && value > 0)) {
    throw invalidValue(field, value, 'a number > 0');
  }
}

/** Checks that `queue` is a float32 `[K, D]` matrix (K ≥ 1) with the embeddings' D. */
export function checkQueue(fn: string, queue: tf.Tensor, d: number): void {
  if (queue.rank !== 2 || queue.shape[0] < 1) throw new Error(`${fn}: queue must be [K, D] with K >= 1, got shape [${queue.shape.join(', ')}]`);
  if (queue.dtype !== 'float32') throw new Error(`${fn}: queue must be float32, got ${queue.dtype}`);
  if (queue.shape[1] !== d) throw new Error(`${fn}: queue [${queue.shape.join(', ')}] must have D = ${d} columns, as the embeddings`);
}

/** A `[rows, width]` bool mask, true at `(i, cols[i])`. */
export function oneHotMask(cols: number[], width: number): tf.Tensor2D {
  return tf.cast(tf.oneHot(tf.tensor1d(cols, 'int32'), width), 'bool') as tf.Tensor2D;
}

/** Mean over rows of the cross-entropy of `logits` `[R, M]` with target column `targets[i]` for row i. */
export function meanCrossEntropy(logits: tf.Tensor2D, targets: number[]): tf.Scalar {
  const [rows, width] = logits.shape;
  if (targets.length !== rows) throw new Error(`meanCrossEntropy: ${targets.length} targets for ${rows} rows`);
  const picked = tf.sum(tf.mul(tf.logSoftmax(logits, 1), tf.cast(tf.oneHot(tf.tensor1d(targets, 'int32'), width), 'float32')), 1); // [R]: log p(target)
  return tf.neg(tf.mean(picked)) as tf.Scalar;
}

/** `[first, first + 1, …, first + count − 1]`: the global columns of this rank's rows. */
export function rangeFrom(first: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => first + i);
}

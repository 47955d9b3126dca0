/**
 * Small tensor helpers shared by the losses. Pure functions of tensors; they create no
 * tf.tidy scope of their own, so call them inside the caller's tidy.
 */
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

/** Σ_{i≠j} c_ij² of a square matrix `[D, D]` (masked, not Σc² − Σc_ii², to avoid cancellation). */
export function offDiagonalSumOfSquares(c: tf.Tensor2D): tf.Scalar {
  const d = c.shape[0];
  const offMask = tf.sub(tf.ones([d, d]), tf.eye(d));
  return tf.sum(tf.square(tf.mul(c, offMask)));
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

import { tf, type Tensor } from './tf.js';

const stopGradient = tf.customGrad((...args) => {
  const input = args[0] as Tensor;
  return { value: tf.clone(input), gradFunc: (dy: Tensor | Tensor[]) => tf.zerosLike(dy as Tensor) };
});

/**
 * The value of `x` with no gradient flowing back into it (PyTorch's `x.detach()`): the
 * backward pass returns exact zeros, so whatever produced `x` gets nothing through here.
 */
export function detach<T extends Tensor>(x: T): T {
  return stopGradient(x) as T;
}

/**
 * Adds each tensor of `grads` into `total` under its name (a running sum over batches or
 * chunks): the first one is taken as is, later ones replace the sum by a new one. Takes
 * ownership of `grads`; superseded tensors are disposed.
 */
export function addInto(total: Record<string, Tensor>, grads: Record<string, Tensor>): void {
  for (const [name, g] of Object.entries(grads)) {
    const previous = total[name];
    total[name] = previous ? tf.add(previous, g) : g;
    if (previous) tf.dispose([previous, g]);
  }
}

/**
 * Rows divided by their L2 norm, `x / max(‖x‖, eps)` (PyTorch's `F.normalize(x, dim=1)`):
 * `[B, D] -> [B, D]`. Written as `x * rsqrt(max(Σx², eps²))` so that the gradient stays
 * finite for a zero row. The one row normalisation of the code base (losses, kNN, the
 * collapse metric, the report).
 */
export function l2NormalizeRows<T extends Tensor>(x: T, eps = 1e-12): T {
  const sumSq = tf.sum(tf.square(x), 1, true);
  return tf.mul(x, tf.rsqrt(tf.maximum(sumSq, eps * eps))) as T;
}

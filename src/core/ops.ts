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

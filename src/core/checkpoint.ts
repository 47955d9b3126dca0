/**
 * Activation checkpointing (PyTorch's `torch.utils.checkpoint`, timm's
 * `set_grad_checkpointing`): a layer's forward that keeps none of its intermediate
 * activations for the backward pass, only its input; the backward runs the forward again
 * from that input and differentiates it. It costs one more forward of the layer and saves
 * every activation inside it: a transformer block keeps its `[B, N, D]` input instead of
 * about 30 tensors of that size (attention maps and the 4x-wide MLP included).
 *
 * The recomputation runs the same kernels on the same values, so outputs and gradients equal
 * those of the plain forward exactly (tests/core/checkpoint.test.ts). Only for layers whose
 * forward is a function of its input and parameters alone: no randomness (dropout) and no
 * buffers written in training (batch-norm statistics would be updated twice).
 */
import { tf, type Tensor, type Variable } from './tf.js';

/**
 * `forward(x)`, a function of `x` and the variables `params` alone, with its activations
 * recomputed in the backward pass instead of kept; gradients flow to `x` and `params`.
 */
export function checkpointed(forward: (x: Tensor) => Tensor, params: Variable[], x: Tensor): Tensor {
  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as Tensor;
    const save = args[args.length - 1] as tf.GradSaveFunc;
    save([input]);
    // Inside a customGrad forward the tape is off: the layer's intermediates are not recorded and are disposed here.
    const value = forward(input);
    const gradFunc = (dy: Tensor, saved: Tensor[]): Tensor[] => {
      // The gradients of <forward(input), dy> with respect to the saved input and every parameter,
      // from a tape of their own. tfjs runs a backward pass with no gradient depth, so this inner
      // `tf.grads` starts a fresh tape and on finishing drops the engine's active tape, which the
      // outer pass still has to clean up (its saved tensors): the outer tape is put back.
      const engine = tf.engine() as unknown as { state: { activeTape: unknown } };
      const outerTape = engine.state.activeTape;
      try {
        return tf.grads((...xs: Tensor[]) => forward(xs[0]!))([saved[0]!, ...params], dy);
      } finally {
        engine.state.activeTape = outerTape;
      }
    };
    return { value, gradFunc };
  });
  return op(x, ...params);
}

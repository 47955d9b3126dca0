/**
 * Differentiable collectives: tensors in, tensors out, with the gradients that make a W-rank
 * step equal a one-process step on the global batch (docs/design.md, contract 3).
 *
 * ## Scale convention (the one place it is written down)
 *
 * Notation: W ranks, B local samples per rank, N = W·B.
 *
 * 1. The ranks' losses AVERAGE to the global loss: (1/W) Σ_r loss_r = L, as a function of
 *    every rank's inputs. For a loss that is a mean over anchors (NT-Xent, BYOL, VICReg's
 *    invariance term) loss_r is the mean over r's LOCAL anchors: (1/B) Σ_{i local} l_i, and
 *    L = (1/N) Σ_i l_i. A loss of global-batch statistics (Barlow Twins, VICReg's variance
 *    and covariance terms) is computed from all-reduced statistics and every rank returns
 *    the full global value, loss_r = L, which averages to L too.
 * 2. The backward of every collective here SUMS over ranks: {@link allGather} returns to
 *    rank r the sum over all ranks' losses of their gradient w.r.t. r's samples
 *    (reduce-scatter SUM); {@link allReduceSum} returns the all-reduced SUM of the incoming
 *    gradients. So on rank r, autograd yields ∂(Σ_q loss_q)/∂θ restricted to the paths
 *    through r's own samples.
 * 3. DDP AVERAGES parameter gradients over ranks: (1/W) Σ_r ∂(Σ_q loss_q)/∂θ|_r
 *    = ∂((1/W) Σ_q loss_q)/∂θ = ∂L/∂θ, exactly the one-process gradient of the global mean.
 *
 * Change any one of these three (sum a loss instead of averaging it, average in a backward,
 * sum parameter gradients) and the gradient is off by a factor of W or, worse, by a
 * non-constant bias. Known wrong variants: a gather whose backward returns only the local
 * slice of the gradient (drops what other ranks' losses send to this rank's samples), "local
 * slice then all-reduce", and a raw non-differentiable all-reduce (1/W of the gradient, or
 * only the local term).
 *
 * Every rank must call these in the same order with tensors of the same shape, and every rank
 * must back-propagate through them when one does (the backward is a collective too: a rank
 * that skips it leaves the others waiting until the group timeout). Inputs must be float32. With no group or a group of one process they are the identity (a clone).
 */
import { type Tensor, tf } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';

function isSingle(group: ProcessGroup | undefined): group is undefined {
  return group === undefined || group.worldSize === 1;
}

function float32Values(x: Tensor, op: string): Float32Array {
  if (x.dtype !== 'float32') {
    throw new TypeError(`${op}: expected a float32 tensor, got ${x.dtype} (cast it with tf.cast first)`);
  }
  return x.dataSync() as Float32Array;
}

/**
 * Concatenates every rank's `x` along axis 0, ordered by rank: [B, ...] -> [W·B, ...]
 * (rows r·B .. r·B+B-1 come from rank r).
 *
 * Backward: reduce-scatter SUM of the incoming gradient [W·B, ...] — summed over ranks, and
 * this rank's slice [B, ...] returned — so that the gradients every rank's loss sends to this
 * rank's samples all arrive here. See the scale convention above.
 */
export function allGather(x: Tensor, group?: ProcessGroup): Tensor {
  if (isSingle(group)) return tf.clone(x);
  if (x.rank < 1) throw new RangeError('allGather: expected a tensor of rank >= 1 ([B, ...])');
  const g = group;
  const gather = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as Tensor;
    // dataSync() may alias the tensor's storage: allGather only reads it.
    const gathered = g.allGather(float32Values(input, 'allGather'));
    const value = tf.tensor(gathered, [g.worldSize * input.shape[0]!, ...input.shape.slice(1)], 'float32');
    const gradFunc = (dy: Tensor): Tensor => {
      const slice = g.reduceScatter(float32Values(dy, 'allGather (backward)'));
      return tf.tensor(slice, input.shape, 'float32');
    };
    return { value, gradFunc };
  });
  return gather(x);
}

/**
 * Element-wise sum of `x` over ranks: [...] -> [...] (same shape on every rank).
 *
 * Backward: all-reduce SUM of the incoming gradient. Example (2 ranks, docs/design.md): x = 1,
 * s = allReduceSum((r+2)·x), y = (r+2)·s gives dy/dx = 10 on rank 0 and 15 on rank 1, whose
 * sum 25 is the one-process gradient of y_0 + y_1; a raw (non-differentiable) all-reduce
 * would give 4 and 9. See the scale convention above.
 */
export function allReduceSum(x: Tensor, group?: ProcessGroup): Tensor {
  if (isSingle(group)) return tf.clone(x);
  const g = group;
  const reduce = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const input = args[0] as Tensor;
    // The all-reduce works in place: copy out of the tensor's storage first.
    const data = float32Values(input, 'allReduceSum').slice();
    g.allReduce(data, 'sum');
    const value = tf.tensor(data, input.shape, 'float32');
    const gradFunc = (dy: Tensor): Tensor => {
      const grad = float32Values(dy, 'allReduceSum (backward)').slice();
      g.allReduce(grad, 'sum');
      return tf.tensor(grad, dy.shape, 'float32');
    };
    return { value, gradFunc };
  });
  return reduce(x);
}

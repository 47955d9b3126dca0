/**
 * Deliberately WRONG distributed variants of the zoo3 losses, used only as negative controls by
 * tests/distributed/losses.full.test.ts (they live here, in the tests, never in src):
 * - `simdino-local-coding-rate`: SimDINO's coding rate of this rank's own Gram matrix (the
 *   reference implementation's default, `reduce_cov=0`);
 * - `lejepa-local-stats`: LeJEPA's SIGReg with the characteristic function of this rank's
 *   batch only;
 * - `lejepa-no-grad-all-reduce`: lightly #1920: SIGReg's sums all-reduced by a collective that
 *   autograd does not see (`torch.distributed.all_reduce`): the forward values are the global
 *   ones, but the backward keeps each rank's own gradient instead of summing them, so each
 *   rank's SIGReg gradient is 1/W of what the scale convention needs (after DDP's averaging,
 *   1/W of the one-process gradient);
 * - `msn-local-statistics`: MSN's ME-MAX of each rank's own mean anchor probability (lightly's
 *   `MSNLoss`) and its Sinkhorn-Knopp targets balanced within each rank's batch;
 * - `vicregl-local-stats`: VICRegL's variances and covariances of each rank's own batch;
 * - `koleo-local-neighbours`: KoLeo with each row's nearest neighbour among this rank's rows
 *   (DINOv2's per-GPU `KoLeoLoss`);
 * - `dinov2-local-statistics`: DINOv2 with both Sinkhorn-Knopp balancings and KoLeo over each
 *   rank's own rows (the reference's KoLeo is per GPU; its Sinkhorn-Knopp all-reduces).
 * The first two and the last four are the real loss called with a one-process group; the third the real loss
 * with a group whose all-reduce is the identity once the backward pass has started.
 */
import { SingleProcessGroup, type ProcessGroup } from '../../../src/core/process-group.js';
import { tf, type Scalar } from '../../../src/core/tf.js';
import { caseLossSpec, type CaseLossFn } from '../../../src/verify/index.js';

export const ZOO3_WRONG_VARIANTS = [
  'simdino-local-coding-rate',
  'lejepa-local-stats',
  'lejepa-no-grad-all-reduce',
  'msn-local-statistics',
  'vicregl-local-stats',
  'koleo-local-neighbours',
  'dinov2-local-statistics',
] as const;
export type Zoo3WrongVariant = (typeof ZOO3_WRONG_VARIANTS)[number];

/** The case each wrong variant is checked against. */
export const ZOO3_WRONG_VARIANT_OF: Record<Zoo3WrongVariant, string> = {
  'simdino-local-coding-rate': 'simdino',
  'lejepa-local-stats': 'lejepa',
  'lejepa-no-grad-all-reduce': 'lejepa',
  'msn-local-statistics': 'msn',
  'vicregl-local-stats': 'vicregl',
  'koleo-local-neighbours': 'koleo',
  'dinov2-local-statistics': 'dinov2',
};

/** The file's loss on this rank's batch alone. */
const local: CaseLossFn = (c, x) => caseLossSpec(c.loss)!.run(c, x, new SingleProcessGroup());

/** A group whose all-reduce stops reducing once {@link backward} is set: a collective autograd does not see. */
class ForwardOnlyAllReduce implements ProcessGroup {
  backward = false;
  constructor(private readonly group: ProcessGroup) {}
  get rank(): number {
    return this.group.rank;
  }
  get worldSize(): number {
    return this.group.worldSize;
  }
  allReduce(data: Float32Array, op?: 'sum' | 'avg' | 'max'): void {
    if (!this.backward) this.group.allReduce(data, op);
  }
  allGather(data: Float32Array): Float32Array {
    return this.group.allGather(data);
  }
  reduceScatter(data: Float32Array): Float32Array {
    return this.group.reduceScatter(data);
  }
  broadcast(data: Float32Array, root?: number): void {
    this.group.broadcast(data, root);
  }
  barrier(): void {
    this.group.barrier();
  }
  close(): void {}
}

/** The loss through a group whose all-reduce has no backward: the identity on the loss marks where the backward pass starts. */
const noGradAllReduce: CaseLossFn = (c, x, group) => {
  if (!group) throw new Error('lejepa-no-grad-all-reduce: needs the process group');
  const wrapped = new ForwardOnlyAllReduce(group);
  const loss = caseLossSpec(c.loss)!.run(c, x, wrapped) as Scalar;
  const markBackward = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => ({
    value: tf.clone(args[0] as tf.Tensor),
    gradFunc: (dy: tf.Tensor) => {
      wrapped.backward = true;
      return dy;
    },
  }));
  return markBackward(loss) as Scalar;
};

export const ZOO3_WRONG: Record<Zoo3WrongVariant, CaseLossFn> = {
  'simdino-local-coding-rate': local,
  'lejepa-local-stats': local,
  'lejepa-no-grad-all-reduce': noGradAllReduce,
  'msn-local-statistics': local,
  'vicregl-local-stats': local,
  'koleo-local-neighbours': local,
  'dinov2-local-statistics': local,
};

/**
 * Deliberately WRONG distributed variants of zoo losses, used only as negative controls by
 * tests/distributed/losses.full.test.ts (they live here, in the tests, never in src):
 * - `nnclr-local-targets`: NNCLR with the target of local row i at column i (as if there were
 *   one rank) instead of rank·B + i;
 * - `dclw-local-softmax`: DCLW with lightly's weights, 2 − B·softmax over the LOCAL batch.
 */
import { type Scalar, type Tensor, tf } from '../../../src/core/tf.js';
import type { ProcessGroup } from '../../../src/core/process-group.js';
import { detach } from '../../../src/core/ops.js';
import { batchLayout, gatherRows, l2NormalizeRows, MASKED_LOGIT } from '../../../src/losses/index.js';
import type { CaseLossFn, CaseTensors, LossCase } from '../../../src/verify/index.js';

export const ZOO_WRONG_VARIANTS = ['nnclr-local-targets', 'dclw-local-softmax'] as const;
export type ZooWrongVariant = (typeof ZOO_WRONG_VARIANTS)[number];

/** The case each wrong variant is checked against. */
export const WRONG_VARIANT_OF: Record<ZooWrongVariant, string> = {
  'nnclr-local-targets': 'nnclr',
  'dclw-local-softmax': 'dclw',
};

type T2 = tf.Tensor2D;

function oneHot(cols: number[], width: number): Tensor {
  return tf.oneHot(tf.tensor1d(cols, 'int32'), width);
}

function nnclrLocalTargets(c: LossCase, x: CaseTensors, group: ProcessGroup | undefined): Scalar {
  const layout = batchLayout('nnclr-local-targets', x.neighbours!.shape[0]!, group);
  return tf.tidy(() => {
    const nn = l2NormalizeRows(detach(x.neighbours as T2));
    const all = gatherRows(l2NormalizeRows(x.predictions as T2), layout);
    const logits = tf.div(tf.matMul(nn, all, false, true), c.hyper.temperature!);
    const targets = Array.from({ length: layout.localBatch }, (_, i) => i); // WRONG: not offset + i
    const logProb = tf.sum(tf.mul(tf.logSoftmax(logits, 1), tf.cast(oneHot(targets, layout.globalBatch), 'float32')), 1);
    return tf.neg(tf.mean(logProb)) as Scalar;
  });
}

function dclwLocalSoftmax(c: LossCase, x: CaseTensors, group: ProcessGroup | undefined): Scalar {
  const layout = batchLayout('dclw-local-softmax', x.z1!.shape[0]!, group);
  const t = c.hyper.temperature!;
  return tf.tidy(() => {
    const n1 = l2NormalizeRows(x.z1 as T2);
    const n2 = l2NormalizeRows(x.z2 as T2);
    const all1 = gatherRows(n1, layout);
    const all2 = gatherRows(n2, layout);
    // WRONG (lightly's DCLWLoss under DDP): the softmax over this rank's B rows, times B.
    const s = detach(tf.sum(tf.mul(n1, n2), 1));
    const w = tf.sub(2, tf.mul(layout.localBatch, tf.softmax(tf.div(s, c.hyper.sigma!))));
    const cols = Array.from({ length: layout.localBatch }, (_, i) => layout.offset + i);
    const own = tf.cast(oneHot(cols, layout.globalBatch), 'bool');
    const side = (a: T2, allA: T2, allB: T2) => {
      const sAA = tf.div(tf.matMul(a, allA, false, true), t);
      const sAB = tf.div(tf.matMul(a, allB, false, true), t);
      const positive = tf.mul(tf.sum(tf.mul(sAB, tf.cast(own, 'float32')), 1), w);
      const masked = tf.fill(sAA.shape, MASKED_LOGIT);
      const negatives = tf.concat([tf.where(own, masked, sAA), tf.where(own, masked, sAB)], 1);
      return tf.mean(tf.sub(tf.logSumExp(negatives, 1), positive));
    };
    return tf.mul(0.5, tf.add(side(n1, all1, all2), side(n2, all2, all1))) as Scalar;
  });
}

export const WRONG_VARIANTS: Record<ZooWrongVariant, CaseLossFn> = {
  'nnclr-local-targets': nnclrLocalTargets,
  'dclw-local-softmax': dclwLocalSoftmax,
};

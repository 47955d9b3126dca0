/**
 * A test method for the non-finite stop, registered as `simclr_nan` when this module is
 * preloaded (`node --import <this file> bin.js --method simclr_nan ...`; the launcher
 * passes the flag on to its workers). It is SimCLR, except that at optimizer step
 * `nanAtStep` (1-based; 0: never) on rank `nanRank` (-1: every rank) it poisons:
 * `nanKind` 0 the loss (NaN loss, NaN gradients), 1 only the gradient (the loss stays
 * finite: 0 · sqrt(w - w) adds nothing to it but has a NaN gradient).
 */
import { tf, type Scalar, type Tensor } from '../../src/core/tf.js';
import { defineArgs, type ArgValues } from '../../src/methods/args.js';
import type { StepInfo, StepOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { SimCLR } from '../../src/methods/simclr.js';

export class NanSimCLR extends SimCLR {
  static override readonly args = defineArgs({
    ...SimCLR.args,
    nanAtStep: { kind: 'int', default: 0, ge: 0, description: 'optimizer step (1-based) that is poisoned; 0: never' },
    nanRank: { kind: 'int', default: -1, ge: -1, description: 'rank that poisons it; -1: every rank' },
    nanKind: { kind: 'int', default: 0, ge: 0, le: 1, description: '0: NaN loss, 1: NaN gradient only' },
  });
  declare readonly args: ArgValues<typeof NanSimCLR.args>;
  private stepsDone = 0;

  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    this.stepsDone = info.step;
  }

  override trainingStep(views: Tensor[], labels: Tensor): StepOutput {
    const out = super.trainingStep(views, labels);
    const { nanAtStep, nanRank, nanKind } = this.args;
    const poisoned = nanAtStep > 0 && this.stepsDone + 1 === nanAtStep && (nanRank < 0 || (this.group?.rank ?? 0) === nanRank);
    if (!poisoned) return out;
    if (nanKind === 0) {
      const loss = tf.keep(tf.mul(out.metrics.loss, NaN)) as Scalar;
      out.metrics.loss.dispose();
      return { loss: tf.mul(out.loss, NaN) as Scalar, metrics: { ...out.metrics, loss } };
    }
    const w = this.classifier.trainableParameters()[0];
    return { loss: tf.add(out.loss, tf.mul(0, tf.sum(tf.sqrt(tf.sub(w, w))))) as Scalar, metrics: out.metrics };
  }
}

registerMethod('simclr_nan', NanSimCLR);

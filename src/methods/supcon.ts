import type { Tensor, Tensor1D, Tensor2D } from '../core/tf.js';
import { supconLoss, type SupconVariant } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { OptimDefaults, SslLossOutput } from './base.js';
import { SimCLR } from './simclr.js';

/**
 * SupCon (Khosla et al. 2020), supervised: SimCLR's projector (Linear-ReLU-Linear, no
 * norm) and the supervised contrastive loss, where every other view of the global batch
 * with the anchor's *label* is a positive. `variant` picks the loss: `in` (default), the
 * paper's L_in, the log of the summed positives, as solo-learn computes it
 * (`simclr_loss_func` with the labels as indexes; the recipes' results were measured with it),
 * or `out`, the paper's recommended L_out, the mean of the per-positive log-probabilities (see
 * {@link supconLoss}). It needs labelled data ({@link SupCon.needsLabels}); the batch's labels
 * reach {@link embeddingLoss}. With all labels distinct either variant is SimCLR's NT-Xent.
 *
 * Defaults are solo-learn's CIFAR recipe (`scripts/pretrain/cifar/supcon.yaml`): projector
 * 2048 -> 256, temperature 0.2, SGD (momentum 0.9) lr 0.4, classifier lr 0.1, weight decay
 * 1e-5, SimCLR's symmetric views.
 */
export class SupCon extends SimCLR {
  static override readonly args = defineArgs({
    ...SimCLR.args,
    temperature: { kind: 'float', default: 0.2, gt: 0, description: 'softmax temperature of the supervised contrastive loss' },
    variant: {
      kind: 'choice',
      default: 'in',
      choices: ['in', 'out'],
      description:
        "in: L_in, the log of the summed positives (solo-learn's); out: L_out, the mean of the per-positive log-probabilities (the paper's recommendation)",
    },
  });
  declare readonly args: ArgValues<typeof SupCon.args>;
  static override readonly paper = 'Khosla et al. 2020, "Supervised Contrastive Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'sgd', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-5 };
  static override readonly needsLabels = true;

  /** `labels` `[B]` int32: the class of each sample (shared by its views). */
  override embeddingLoss(embeddings: Tensor[], labels: Tensor): SslLossOutput {
    const loss = supconLoss(embeddings as Tensor2D[], labels as Tensor1D, { temperature: this.args.temperature, variant: this.args.variant as SupconVariant });
    return { loss, embeddings: embeddings[0] };
  }
}

import type { Tensor, Tensor2D } from '../core/tf.js';
import { dclLoss } from '../losses/index.js';
import { defineArgs, type ArgValues } from './args.js';
import type { OptimDefaults, SslLossOutput } from './base.js';
import { SimCLR } from './simclr.js';

/**
 * DCL (Yeh et al. 2022), decoupled contrastive learning: SimCLR with the positive pair
 * removed from the denominator of the contrastive loss; with `sigma` > 0 it is the weighted
 * variant DCLW, whose positive term of sample i is weighted by `2 - N softmax_i(s_ii / σ)`
 * over the positive similarities s_ii of the global batch (exact over W ranks, unlike
 * lightly's per-GPU softmax).
 *
 * One method, one switch: `sigma` = 0 (the default) is DCL, unweighted; `sigma` > 0 is DCLW
 * with that σ (the paper's is 0.5: `--method-arg sigma=0.5`). 0 is a switch, not a limit
 * (DCLW's weights tend to DCL's 1 as σ grows).
 *
 * Not in solo-learn: the architecture and recipe are SimCLR's CIFAR ones (projector
 * Linear-ReLU-Linear 2048 -> 256, LARS lr 0.4, classifier lr 0.1, weight decay 1e-4,
 * SimCLR's views), with the temperature 0.1 of the paper and of lightly's `DCLLoss`.
 */
export class DCL extends SimCLR {
  static override readonly args = defineArgs({
    ...SimCLR.args,
    temperature: { kind: 'float', default: 0.1, gt: 0, description: 'softmax temperature of the decoupled contrastive loss' },
    sigma: { kind: 'float', default: 0, ge: 0, description: '0: DCL (unweighted); > 0: DCLW with this sigma of its von Mises-Fisher weights (paper: 0.5)' },
  });
  declare readonly args: ArgValues<typeof DCL.args>;
  static override readonly paper = 'Yeh et al. 2022, "Decoupled Contrastive Learning"';
  static override readonly optimDefaults: OptimDefaults = { optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-4 };

  /** Whether this is the weighted variant DCLW (`sigma` > 0). */
  get weighted(): boolean {
    return this.args.sigma > 0;
  }

  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    const { temperature, sigma } = this.args;
    const loss = dclLoss(z1 as Tensor2D, z2 as Tensor2D, this.weighted ? { temperature, sigma } : { temperature });
    return { loss, embeddings: z1 };
  }
}

/**
 * A test method for multi-crop, registered as `multicrop_simclr` when this module is
 * preloaded (`node --import <this file> bin.js --method multicrop_simclr ...`; the launcher
 * passes the flag on to its workers). No built-in method takes local crops yet; this one is
 * SimCLR declaring multi-crop (2 global crops, 4 local ones by default, so its views are
 * forwarded per crop size) with NT-Xent averaged over every (global crop, other crop) pair,
 * as solo-learn's multi-crop SimCLR contrasts every crop.
 */
import type { Scalar, Tensor, Tensor2D } from '../../src/core/tf.js';
import { tf } from '../../src/core/tf.js';
import type { CropPolicy } from '../../src/data/augment/crops.js';
import { ntXentLoss } from '../../src/losses/index.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { SimCLR } from '../../src/methods/simclr.js';

export class MultiCropSimCLR extends SimCLR {
  static override readonly crops: CropPolicy = { globalCrops: 2, multiCrop: true, defaultLocalCrops: 4 };

  /** Mean NT-Xent of (z_g, z_j) over global crops g and every other crop j (`[B, D]` each). */
  override embeddingLoss(z: Tensor[], _labels?: Tensor): SslLossOutput {
    const terms: Scalar[] = [];
    for (let g = 0; g < 2; g++) {
      for (let j = 0; j < z.length; j++) {
        if (j !== g) terms.push(ntXentLoss(z[g] as Tensor2D, z[j] as Tensor2D, { temperature: this.args.temperature }));
      }
    }
    return { loss: tf.div(tf.addN(terms), terms.length) as Scalar, embeddings: z[0] };
  }
}

registerMethod('multicrop_simclr', MultiCropSimCLR);

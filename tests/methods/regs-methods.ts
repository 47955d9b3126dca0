/**
 * Negative-control methods for the multi-process tests of W-MSE, registered when this module
 * is loaded (the exactness tests' batch worker, tests/distributed/workers/cli-batch.ts, imports
 * it; or `node --import <this file> bin.js --method wmse_local ...`):
 *
 * - `wmse_local`: W-MSE whitening each rank's batch on its own (its sub-batches drawn from
 *   and whitened over the local rows only), which is solo-learn's behaviour under DDP and
 *   another objective than the global batch's. `verify` must fail it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { WMSE } from '../../src/methods/wmse.js';

export class LocalWMSE extends WMSE {
  override embeddingLoss(views: Tensor[]): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.embeddingLoss(views));
  }
}

registerMethod('wmse_local', LocalWMSE);

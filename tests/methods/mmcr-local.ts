/**
 * A negative control for MMCR's multi-process tests, registered as `mmcr_local` when this module
 * is loaded (tests/distributed/workers/cli-batch.ts imports it): MMCR whose loss runs on this
 * rank's batch only (a group of one), so each rank maximises the nuclear norm of its own
 * centroids (lightly's `MMCRLoss` under DDP). `verify` must fail on it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { MMCR } from '../../src/methods/mmcr.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalMMCR extends MMCR {
  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.embeddingLoss(embeddings));
  }
}

registerMethod('mmcr_local', LocalMMCR);

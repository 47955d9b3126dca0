/**
 * A negative control for SwAV's distributed tests, registered as `swav_local_sinkhorn` when
 * this module is loaded (tests/distributed/workers/cli-batch.ts imports it): SwAV whose loss runs on
 * this rank's batch only (a group of one), so Sinkhorn-Knopp equalises the prototypes' shares
 * within each rank's batch — what solo-learn does under DDP with world_size 1. `verify` must
 * fail on it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { SwAV } from '../../src/methods/swav.js';

export class LocalSinkhornSwAV extends SwAV {
  protected override sslLoss(features: Tensor[], views: Tensor[], labels: Tensor): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.sslLoss(features, views, labels));
  }
}

registerMethod('swav_local_sinkhorn', LocalSinkhornSwAV);

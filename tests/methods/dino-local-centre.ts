/**
 * A negative control for DINO's distributed tests, registered as `dino_local_centre` when this
 * module is loaded (tests/distributed/workers/cli-batch.ts imports it): DINO whose loss runs on this
 * rank's batch only (a group of one), so its centre moves with this rank's teacher mean
 * instead of the global batch's. `verify` must fail on it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { DINO } from '../../src/methods/dino.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalCentreDINO extends DINO {
  protected override sslLoss(features: Tensor[], views: Tensor[], labels: Tensor): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.sslLoss(features, views, labels));
  }
}

registerMethod('dino_local_centre', LocalCentreDINO);

/**
 * A negative control for LeJEPA's distributed tests, registered as `lejepa_local` when this
 * module is loaded (tests/distributed/workers/cli-batch.ts imports it): LeJEPA whose loss runs
 * on this rank's batch only (a group of one), so SIGReg tests each rank's own empirical
 * characteristic function, another objective than the global batch's. `verify` must fail it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { LeJEPA } from '../../src/methods/lejepa.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalStatsLeJEPA extends LeJEPA {
  override embeddingLoss(views: Tensor[]): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.embeddingLoss(views));
  }
}

registerMethod('lejepa_local', LocalStatsLeJEPA);

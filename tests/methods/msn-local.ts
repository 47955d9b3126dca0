/**
 * A negative control for MSN's distributed tests, registered as `msn_local` when this module is
 * loaded (tests/distributed/workers/cli-batch.ts imports it): MSN whose loss runs on this
 * rank's batch only (a group of one), so its ME-MAX term is the entropy of each rank's own mean
 * anchor probability (lightly's `MSNLoss`), another objective than the global batch's. Run with
 * `sinkhornIterations=0`, ME-MAX is the only statistic it changes. `verify` must fail it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import { MSN } from '../../src/methods/msn.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalMeMaxMSN extends MSN {
  protected override inGroup<T>(fn: () => T): T {
    return withProcessGroup(new SingleProcessGroup(), fn);
  }
}

registerMethod('msn_local', LocalMeMaxMSN);

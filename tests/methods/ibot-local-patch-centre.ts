/**
 * A negative control for iBOT's distributed tests, registered as `ibot_local_patch_centre` when
 * this module is loaded (tests/distributed/workers/cli-batch.ts imports it): iBOT whose loss runs
 * on this rank's batch only (a group of one), so its centres move with this rank's teacher
 * means instead of the global batch's. Run with `centreMomentum=1` (the `[CLS]` centre then
 * never moves, and DINO's own control covers it), only the patch centre is per rank, and
 * `verify` must fail on it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import { IBOT } from '../../src/methods/ibot.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalPatchCentreIBOT extends IBOT {
  protected override inGroup<T>(fn: () => T): T {
    return withProcessGroup(new SingleProcessGroup(), fn);
  }
}

registerMethod('ibot_local_patch_centre', LocalPatchCentreIBOT);

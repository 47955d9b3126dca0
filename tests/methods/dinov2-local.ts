/**
 * Negative controls for DINOv2's distributed tests, registered when this module is loaded
 * (tests/distributed/workers/cli-batch.ts imports it); `verify` must fail each:
 * - `dinov2_local_sinkhorn`: the whole loss on this rank's batch only (a group of one), run with
 *   `koleoWeight=0`, so the only per-rank statistics are the two Sinkhorn-Knopp balancings (of
 *   the `[CLS]` and of the masked patches) within each rank's rows;
 * - `dinov2_local_koleo`: Sinkhorn-Knopp over the global batch, KoLeo's nearest neighbours among
 *   each rank's own rows (the reference's per-GPU `KoLeoLoss`).
 */
import { SingleProcessGroup, withProcessGroup, type ProcessGroup } from '../../src/core/process-group.js';
import { DINOv2 } from '../../src/methods/dinov2.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalSinkhornDINOv2 extends DINOv2 {
  protected override inGroup<T>(fn: () => T): T {
    return withProcessGroup(new SingleProcessGroup(), fn);
  }
}

export class LocalKoleoDINOv2 extends DINOv2 {
  protected override koleoGroup(): ProcessGroup {
    return new SingleProcessGroup();
  }
}

registerMethod('dinov2_local_sinkhorn', LocalSinkhornDINOv2);
registerMethod('dinov2_local_koleo', LocalKoleoDINOv2);

/**
 * A negative control for SimDINO's distributed tests, registered as `simdino_local` when this
 * module is loaded (tests/distributed/workers/cli-batch.ts imports it): SimDINO whose loss runs
 * on this rank's batch only (a group of one), so its coding rate is that of each rank's own
 * Gram matrix (the reference implementation's default, `reduce_cov=0`), another objective than
 * the global batch's. `verify` must fail it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { SimDINO } from '../../src/methods/simdino.js';

export class LocalCodingRateSimDINO extends SimDINO {
  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.embeddingLoss(embeddings));
  }
}

registerMethod('simdino_local', LocalCodingRateSimDINO);

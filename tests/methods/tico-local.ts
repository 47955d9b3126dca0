/**
 * A negative control for TiCo's multi-process tests, registered as `tico_local` when this module
 * is loaded (tests/distributed/workers/cli-batch.ts imports it): TiCo whose loss runs on this
 * rank's batch only (a group of one), so its covariance term and running covariance are each
 * rank's own (lightly's `TiCoLoss(gather_distributed=False)`). `verify` must fail on it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { TiCo } from '../../src/methods/tico.js';

export class LocalTiCo extends TiCo {
  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    return withProcessGroup(new SingleProcessGroup(), () => super.embeddingLoss(embeddings));
  }
}

registerMethod('tico_local', LocalTiCo);

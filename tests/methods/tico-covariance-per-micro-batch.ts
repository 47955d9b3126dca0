/**
 * A negative control for the accumulation test of TiCo (tico.test.ts): TiCo with its running
 * covariance moved inside every micro-batch's loss (the bug class of lightly #2062), so that
 * under `--accumulate-grad-batches k` it moves k times a step and the later micro-batches'
 * losses see a covariance the batch of kN never uses. Never registered; built by the tests only.
 */
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { TiCo } from '../../src/methods/tico.js';

export class TicoCovariancePerMicroBatch extends TiCo {
  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    const out = super.embeddingLoss(embeddings);
    this.applyPendingCovariance();
    return out;
  }
}

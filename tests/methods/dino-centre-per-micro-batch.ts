/**
 * A negative control for the accumulation tests (accumulation-state.test.ts): DINO with its
 * centre moved inside every micro-batch's loss, as before issue #33 (and as lightly #2062), so
 * that under `--accumulate-grad-batches k` it moves k times a step and the later micro-batches'
 * losses see a centre the batch of kN never uses. Never registered; built by the tests only.
 */
import type { Tensor } from '../../src/core/tf.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { DINO } from '../../src/methods/dino.js';

export class DinoCentrePerMicroBatch extends DINO {
  override embeddingLoss(embeddings: Tensor[]): SslLossOutput {
    const out = super.embeddingLoss(embeddings);
    this.applyPendingCentre();
    return out;
  }
}

/**
 * Negative control `simclr_local_slice_gather`: SimCLR whose all-gather backward returns this
 * rank's slice of its own incoming gradient instead of the sum over ranks (the bug of several
 * public SimCLR ports). `verify` must catch it. Importing this module registers it.
 */
import type { Tensor, Tensor2D } from '../../src/core/tf.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { ntXentLoss } from '../../src/losses/index.js';
import type { SslLossOutput } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';
import { SimCLR } from '../../src/methods/simclr.js';

/** `group` with a reduce-scatter that keeps the local slice without summing over ranks. */
function localSliceGroup(group: ProcessGroup): ProcessGroup {
  const wrong = Object.create(group) as ProcessGroup;
  wrong.reduceScatter = (data: Float32Array) => {
    const n = data.length / group.worldSize;
    return data.slice(group.rank * n, (group.rank + 1) * n);
  };
  return wrong;
}

class LocalSliceGatherSimCLR extends SimCLR {
  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    const group = this.group && this.group.worldSize > 1 ? localSliceGroup(this.group) : this.group;
    return { loss: ntXentLoss(z1 as Tensor2D, z2 as Tensor2D, { temperature: this.args.temperature }, group), embeddings: z1 };
  }
}

registerMethod('simclr_local_slice_gather', LocalSliceGatherSimCLR);

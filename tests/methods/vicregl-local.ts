/**
 * A negative control for VICRegL's distributed tests, registered as `vicregl_local` when this
 * module is loaded (tests/distributed/workers/cli-batch.ts imports it): VICRegL whose local
 * (feature-map) terms are computed on this rank's batch only (a group of one), so their
 * variance and covariance are each rank's own; the global terms stay the global batch's.
 * `verify` must fail it.
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import { tf, type Scalar, type Tensor2D } from '../../src/core/tf.js';
import type { VicreglResult } from '../../src/losses/index.js';
import { registerMethod } from '../../src/methods/registry.js';
import { VICRegL } from '../../src/methods/vicregl.js';

export class LocalMapsStatsVICRegL extends VICRegL {
  protected override objective(embeddings: Tensor2D[], maps: tf.Tensor3D[], locations?: Float32Array[]): VicreglResult {
    const real = super.objective(embeddings, maps, locations);
    const perRank = withProcessGroup(new SingleProcessGroup(), () => super.objective(embeddings, maps, locations));
    const loss = tf.add(tf.mul(real.global, this.args.alpha), tf.mul(perRank.local, 1 - this.args.alpha)) as Scalar;
    tf.dispose([real.loss, real.local, perRank.loss, perRank.global]);
    return { loss, global: real.global, local: perRank.local };
  }
}

registerMethod('vicregl_local', LocalMapsStatsVICRegL);

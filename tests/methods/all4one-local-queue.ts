/**
 * A negative control for All4One's distributed tests, registered as `all4one_local_queue` when
 * this module is loaded: All4One whose support set is fed with this rank's rows only (a
 * per-rank queue, as a port that forgets to gather would keep). `verify` must catch it (its
 * queues differ from the one-process run's).
 */
import { SingleProcessGroup, withProcessGroup } from '../../src/core/process-group.js';
import type { Tensor } from '../../src/core/tf.js';
import { All4One } from '../../src/methods/all4one.js';
import type { MethodContext } from '../../src/methods/base.js';
import { registerMethod } from '../../src/methods/registry.js';

export class LocalQueueAll4One extends All4One {
  constructor(ctx: MethodContext) {
    super(ctx);
    const push = this.queue.push.bind(this.queue);
    this.queue.push = (rows: Tensor[], labels?: Tensor) => withProcessGroup(new SingleProcessGroup(), () => push(rows, labels));
  }
}

registerMethod('all4one_local_queue', LocalQueueAll4One);

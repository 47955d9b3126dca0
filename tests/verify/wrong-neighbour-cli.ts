/**
 * `ssl-train` with one extra method, `nnclr_wrong_neighbour`: NNCLR whose W-rank run looks its
 * neighbours up with the queries negated (it takes the farthest support-set row, a margin of
 * order 1 against the right one, far above round-off), while its one-process runs look them up
 * right. `verify` must fail it as a decision failure: the reference replays the W-rank run's
 * choices, so only the decisions show the bug. Run as the CLI:
 * `node wrong-neighbour-cli.js verify --method nnclr_wrong_neighbour --devices 2 ...` (the
 * launcher re-runs this script for every rank).
 */
import { main } from '../../src/cli/main.js';
import { tf, type Tensor2D } from '../../src/core/tf.js';
import type { MethodContext } from '../../src/methods/base.js';
import { NNCLR } from '../../src/methods/nnclr.js';
import { registerMethod } from '../../src/methods/registry.js';

class WrongNeighbourNNCLR extends NNCLR {
  constructor(ctx: MethodContext) {
    super(ctx);
    const nearest = this.queue.nearest.bind(this.queue);
    this.queue.nearest = (z: Tensor2D, view?: number) => {
      // The step's tidy frees the negated queries (the lookup's gradient still refers to them).
      return this.group && this.group.worldSize > 1 ? nearest(tf.neg(z) as Tensor2D, view) : nearest(z, view);
    };
  }
}

registerMethod('nnclr_wrong_neighbour', WrongNeighbourNNCLR);
process.exitCode = await main(process.argv.slice(2));

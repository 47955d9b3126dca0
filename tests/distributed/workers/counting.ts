/**
 * A process group that counts the collectives it runs (the zoo loss workers report how many
 * each loss needs, forward and backward together).
 */
import type { ProcessGroup } from '../../../src/core/process-group.js';

export interface CollectiveCounts {
  allGather: number;
  reduceScatter: number;
  allReduce: number;
  broadcast: number;
}

/** Zero counts. */
export function noCollectives(): CollectiveCounts {
  return { allGather: 0, reduceScatter: 0, allReduce: 0, broadcast: 0 };
}

/** `group` with its collectives counted in `counts`. */
export function counting(group: ProcessGroup, counts: CollectiveCounts): ProcessGroup {
  return {
    rank: group.rank,
    worldSize: group.worldSize,
    allReduce: (data, op) => {
      counts.allReduce++;
      group.allReduce(data, op);
    },
    allGather: (data) => {
      counts.allGather++;
      return group.allGather(data);
    },
    reduceScatter: (data) => {
      counts.reduceScatter++;
      return group.reduceScatter(data);
    },
    broadcast: (data, root) => {
      counts.broadcast++;
      group.broadcast(data, root);
    },
    barrier: () => group.barrier(),
    close: () => group.close(),
  };
}

/**
 * Worker: DeepCluster v2's global state and loss with W real processes
 * (tests/distributed/deepclusterv2.full.test.ts).
 * - `reference`: the one-process run on the same global batches;
 * - `memory`: a ClusterMemory fed one epoch of global batches of 12 samples, rank r pushing only
 *   its rows r·B .. r·B+B−1 of each (different data per rank), then clustered at the start of
 *   epoch 1 over the group: its bank, written epochs, assignments and prototypes;
 * - `perRank`: the negative control: the same, each rank keeping and clustering only its own
 *   rows (a SingleProcessGroup: no gather, no all-reduce);
 * - `leaked`: tensors allocated and not freed by all of the above.
 */
import { initEngine } from '../../../src/core/engine.js';
import { SingleProcessGroup, withProcessGroup, type ProcessGroup } from '../../../src/core/process-group.js';
import { l2NormalizeRows } from '../../../src/core/ops.js';
import { Rng } from '../../../src/core/random.js';
import { tf } from '../../../src/core/tf.js';
import { ClusterMemory } from '../../../src/methods/cluster-memory.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';

/** The bank's shape in the test: 36 samples, 2 views of 4 values, 2 heads of 3 prototypes; 3 global batches of 12. */
const MEMORY_SHAPE = { datasetSize: 36, views: 2, dim: 4, prototypes: 3, heads: 2 };
const GLOBAL_BATCH = 12;
const KMEANS_ITERATIONS = 5;

export type MemoryState = Record<string, number[]>;

export interface DeepClusterWorkerResult {
  /** The one-process run (this process alone, whole global batches). */
  reference: MemoryState;
  memory: MemoryState;
  perRank: MemoryState;
  leaked: number;
}

/**
 * One epoch into a fresh ClusterMemory, then k-means at the start of epoch 1: the global batches
 * are a seeded permutation of the samples; this process pushes rows `rank·B .. rank·B+B−1` of
 * each (B = 12 / W) with `group` scoped (a one-process run: rank 0 of 1 pushes whole batches).
 */
function clusterOneEpoch(group: ProcessGroup, rank: number, worldSize: number, clusterGroup: ProcessGroup = group): MemoryState {
  const memory = new ClusterMemory({ ...MEMORY_SHAPE, rng: new Rng(5) });
  const order = Rng.keyed(8).permutation(MEMORY_SHAPE.datasetSize);
  const b = GLOBAL_BATCH / worldSize;
  for (let start = 0; start < MEMORY_SHAPE.datasetSize; start += GLOBAL_BATCH) {
    const indices = order.slice(start + rank * b, start + rank * b + b);
    tf.tidy(() => {
      const rows = [0, 1].map((v) => {
        const values = Float32Array.from(Array.from(indices).flatMap((i) => Array.from(Rng.keyed(9, i, v).normalArray(MEMORY_SHAPE.dim))));
        return l2NormalizeRows(tf.tensor2d(values, [b, MEMORY_SHAPE.dim]));
      });
      withProcessGroup(group, () => memory.push(rows, indices));
    });
    memory.flush(0);
  }
  memory.cluster(1, KMEANS_ITERATIONS, clusterGroup);
  const state = Object.fromEntries(Object.entries(memory.stateDict()).map(([name, t]) => [name, Array.from(t.dataSync())]));
  memory.dispose();
  return state;
}

run(async () => {
  const { spec, rank } = readArgs<BaseSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const W = group.worldSize;
  const before = tf.memory().numTensors;
  const single = new SingleProcessGroup();
  const reference = clusterOneEpoch(single, 0, 1);
  const memory = clusterOneEpoch(group, rank, W);
  const perRank = clusterOneEpoch(single, rank, W, single);
  const leaked = tf.memory().numTensors - before;
  group.close();
  const result: DeepClusterWorkerResult = { reference, memory, perRank, leaked };
  return result;
});

/**
 * Worker: the tiled NT-Xent with W real processes (tests/distributed/nt-xent-tiled.test.ts).
 * For every problem, rank r takes rows r·B .. r·B+B−1 of a seeded global batch (so every rank
 * holds DIFFERENT data) and evaluates the plain loss (`tiled: false`) and the tiled one, each
 * with the group: the loss and its gradient w.r.t. this rank's z1 and z2.
 */
import { initEngine } from '../../../src/core/engine.js';
import { tf, type Tensor } from '../../../src/core/tf.js';
import { ntXentLoss } from '../../../src/losses/index.js';
import type { ProcessGroup } from '../../../src/core/process-group.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';
import { globalViews, type TiledProblem } from './nt-xent-tiled-problems.js';

interface TiledSpec extends BaseSpec {
  problems: TiledProblem[];
}

/** A loss value and its gradients w.r.t. this rank's z1, z2 (flattened `[B·D]`). */
export interface TiledRankAnswer {
  value: number;
  g1: number[];
  g2: number[];
}

export interface TiledWorkerResult {
  /** Per problem: the plain and the tiled answers on this rank. */
  answers: Array<{ plain: TiledRankAnswer; tiled: TiledRankAnswer }>;
  leaked: number;
}

function evaluate(p: TiledProblem, rank: number, group: ProcessGroup, tiled: boolean): TiledRankAnswer {
  const b = p.localBatch;
  const global = globalViews(p, group.worldSize);
  const [z1, z2] = global.map((z) => tf.slice(z, [rank * b, 0], [b, -1]) as tf.Tensor2D);
  tf.dispose(global);
  const { value, grads } = tf.valueAndGrads((a: Tensor, c: Tensor) =>
    ntXentLoss(a as tf.Tensor2D, c as tf.Tensor2D, { temperature: p.temperature, tiled, tileSize: p.tileSize }, group),
  )([z1!, z2!]);
  const answer = {
    value: value.dataSync()[0]!,
    g1: Array.from(grads[0]!.dataSync()),
    g2: Array.from(grads[1]!.dataSync()),
  };
  tf.dispose([value, ...grads, z1!, z2!]);
  return answer;
}

run(async () => {
  const { spec, rank } = readArgs<TiledSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const before = tf.memory().numTensors;
  const answers = spec.problems.map((p) => ({
    plain: evaluate(p, rank, group, false),
    tiled: evaluate(p, rank, group, true),
  }));
  const leaked = tf.memory().numTensors - before;
  group.close();
  const result: TiledWorkerResult = { answers, leaked };
  return result;
});

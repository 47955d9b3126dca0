/**
 * Worker: the zoo2 losses with W real processes (tests/distributed/zoo2-losses.test.ts).
 * - `losses`: on each case's reference file, rank r takes rows r·B .. r·B+B−1 of the sharded
 *   inputs and all of the others, and returns its loss, its gradients on those inputs, its
 *   outputs (Sinkhorn assignments, DINO's centre) and the collectives the process group saw
 *   (forward and backward together);
 * - `variants`: the same for the wrong negative controls (workers/zoo2-loss-problems.ts);
 * - `leaked`: tensors allocated and not freed by all of the above.
 */
import { initEngine } from '../../../src/core/engine.js';
import { tf } from '../../../src/core/tf.js';
import type { ZooRankResult } from '../../losses/zoo-cases.js';
import { evaluateZoo2Case, loadZoo2Case, zoo2FixturePath, type Zoo2Loss } from '../../losses/zoo2-cases.js';
import { ZOO2_WRONG, ZOO2_WRONG_VARIANT_OF, type Zoo2WrongVariant } from './zoo2-loss-problems.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';
import { counting, noCollectives, type CollectiveCounts } from './counting.js';

interface Zoo2LossesSpec extends BaseSpec {
  losses: Zoo2Loss[];
  variants: Zoo2WrongVariant[];
}

export interface Zoo2LossesWorkerResult {
  losses: Record<string, ZooRankResult & { collectives: CollectiveCounts }>;
  variants: Record<string, ZooRankResult>;
  leaked: number;
}

run(async () => {
  const { spec, rank } = readArgs<Zoo2LossesSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const W = group.worldSize;
  const before = tf.memory().numTensors;
  const losses: Zoo2LossesWorkerResult['losses'] = {};
  for (const loss of spec.losses) {
    const counts = noCollectives();
    const res = evaluateZoo2Case(loadZoo2Case(zoo2FixturePath(loss)), rank, W, counting(group, counts));
    losses[loss] = { ...res, collectives: counts };
  }
  const variants: Zoo2LossesWorkerResult['variants'] = {};
  for (const v of spec.variants) {
    variants[v] = evaluateZoo2Case(loadZoo2Case(zoo2FixturePath(ZOO2_WRONG_VARIANT_OF[v])), rank, W, group, ZOO2_WRONG[v]);
  }
  const leaked = tf.memory().numTensors - before;
  group.close();
  const result: Zoo2LossesWorkerResult = { losses, variants, leaked };
  return result;
});

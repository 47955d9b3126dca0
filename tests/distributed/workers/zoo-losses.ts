/**
 * Worker: the zoo losses with W real processes (tests/distributed/zoo-losses.test.ts).
 * - `losses`: on each loss's reference file, rank r takes rows r·B .. r·B+B−1 of the sharded
 *   inputs and all of the others, and returns its loss and its gradients on those inputs,
 *   with the number of all-gathers and reduce-scatters the process group saw (forward and
 *   backward together);
 * - `variants`: the same for the wrong negative controls (workers/zoo-loss-problems.ts);
 * - `gatherConstantRows` of a rank-dependent float32 `[2, 3]` and int32 `[2]` tensor: the
 *   gathered values, and the gradient of a loss of the gathered float rows w.r.t. the input;
 * - `leaked`: tensors allocated and not freed by all of the above.
 */
import { initEngine } from '../../../src/core/engine.js';
import { tf, type Tensor } from '../../../src/core/tf.js';
import { batchLayout, gatherConstantRows } from '../../../src/losses/index.js';
import { evaluateZooCase, loadZooCase, zooFixturePath, type ZooLoss, type ZooRankResult } from '../../losses/zoo-cases.js';
import { WRONG_VARIANT_OF, WRONG_VARIANTS, type ZooWrongVariant } from './zoo-loss-problems.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';
import { counting, noCollectives, type CollectiveCounts } from './counting.js';

interface ZooLossesSpec extends BaseSpec {
  losses: ZooLoss[];
  variants: ZooWrongVariant[];
}

export interface ZooLossesWorkerResult {
  losses: Record<string, ZooRankResult & { collectives: CollectiveCounts }>;
  variants: Record<string, ZooRankResult>;
  constantRows: { floats: number[]; ints: number[]; intDtype: string; grad: number[] };
  leaked: number;
}

run(async () => {
  const { spec, rank } = readArgs<ZooLossesSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const W = group.worldSize;
  const before = tf.memory().numTensors;
  const losses: ZooLossesWorkerResult['losses'] = {};
  for (const loss of spec.losses) {
    const counts = noCollectives();
    const res = evaluateZooCase(loadZooCase(zooFixturePath(loss)), rank, W, counting(group, counts));
    losses[loss] = { ...res, collectives: counts };
  }
  const variants: ZooLossesWorkerResult['variants'] = {};
  for (const v of spec.variants) {
    variants[v] = evaluateZooCase(loadZooCase(zooFixturePath(WRONG_VARIANT_OF[v])), rank, W, group, WRONG_VARIANTS[v]);
  }
  const constantRows = tf.tidy(() => {
    const layout = batchLayout('zoo-losses worker', 2, group);
    const x = tf.tensor2d([100 * rank, 100 * rank + 1, 100 * rank + 2, 100 * rank + 10, 100 * rank + 11, 100 * rank + 12], [2, 3]);
    const labels = tf.tensor1d([10 * rank, 10 * rank + 1], 'int32');
    const floats = Array.from(gatherConstantRows(x, layout).dataSync());
    const gathered = gatherConstantRows(labels, layout);
    const grad = tf.grad((t: Tensor) => tf.sum(tf.square(gatherConstantRows(t as tf.Tensor2D, layout))))(x);
    return { floats, ints: Array.from(gathered.dataSync()), intDtype: gathered.dtype, grad: Array.from(grad.dataSync()) };
  });
  const leaked = tf.memory().numTensors - before;
  group.close();
  const result: ZooLossesWorkerResult = { losses, variants, constantRows, leaked };
  return result;
});

/**
 * Worker: every loss of the zoo with W real processes (tests/distributed/losses.full.test.ts),
 * on the cases of `casesFile` (rank r holds its slice of every batch input):
 * - `cases`: each case's loss, gradients, outputs and state after on this rank
 *   (evaluateLossCase), with the collectives the process group saw (forward and backward);
 * - `variants`: the deliberately wrong negative controls on the case each is checked against;
 * - `theta`: SimCLR, Barlow Twins, BYOL, VICReg and their wrong variants with every input mapped
 *   through a shared θ, the DDP-averaged (all-reduce avg) θ gradient;
 * - `gatherConstantRows` of a rank-dependent float32 `[2, 3]` and int32 `[2]` tensor: the
 *   gathered values, and the gradient of a loss of the gathered float rows w.r.t. the input;
 * - `verify`: `runLossCaseOnRank` on each path (the `verify --case FILE --devices W` worker
 *   logic), with its formatted report, or the error it threw;
 * - `leaked`: tensors allocated and not freed by all but `verify`.
 */
import { initEngine } from '../../../src/core/engine.js';
import { tf, type Tensor } from '../../../src/core/tf.js';
import { batchLayout, gatherConstantRows } from '../../../src/losses/index.js';
import { evaluateLossCase, formatLossCaseReport, loadLossCases, runLossCaseOnRank, type LossCaseReport, type RankResult } from '../../../src/verify/index.js';
import { evaluateVariant, LOSS_NAMES, WRONG_VARIANTS as THETA_WRONG, VARIANT_CASE, type Variant, type VariantResult } from './loss-problems.js';
import { CASE_CONTROLS } from './case-controls.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';
import { counting, noCollectives, type CollectiveCounts } from './counting.js';

interface LossCasesSpec extends BaseSpec {
  casesFile: string;
  /** The negative controls to run (names of CASE_CONTROLS). */
  controls: string[];
  verify: string[];
}

export interface LossCasesWorkerResult {
  cases: Record<string, RankResult & { collectives: CollectiveCounts }>;
  variants: Record<string, RankResult>;
  theta: Record<string, VariantResult>;
  constantRows: { floats: number[]; ints: number[]; intDtype: string; grad: number[] };
  verify: Array<{ path: string; report?: LossCaseReport; text?: string; error?: { name: string; message: string } }>;
  leaked: number;
}

run(async () => {
  const { spec, rank } = readArgs<LossCasesSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const W = group.worldSize;
  const file = loadLossCases(spec.casesFile);
  const byName = (name: string) => file.cases.find((c) => c.name === name)!;
  const before = tf.memory().numTensors;
  const cases: LossCasesWorkerResult['cases'] = {};
  for (const c of file.cases) {
    const counts = noCollectives();
    cases[c.name] = { ...evaluateLossCase(c, rank, W, counting(group, counts)), collectives: counts };
  }
  const variants: LossCasesWorkerResult['variants'] = {};
  for (const v of spec.controls) variants[v] = evaluateLossCase(byName(CASE_CONTROLS[v]!.against), rank, W, group, CASE_CONTROLS[v]!.fn);
  const theta: LossCasesWorkerResult['theta'] = {};
  for (const v of [...LOSS_NAMES, ...THETA_WRONG] as Variant[]) {
    const res = evaluateVariant(v, byName(VARIANT_CASE[v]), rank, W, group);
    const avg = Float32Array.from(res.thetaGrad);
    group.allReduce(avg, 'avg'); // DDP: average parameter gradients over ranks
    theta[v] = { ...res, thetaGrad: Array.from(avg) };
  }
  const constantRows = tf.tidy(() => {
    const layout = batchLayout('loss-cases worker', 2, group);
    const x = tf.tensor2d([100 * rank, 100 * rank + 1, 100 * rank + 2, 100 * rank + 10, 100 * rank + 11, 100 * rank + 12], [2, 3]);
    const labels = tf.tensor1d([10 * rank, 10 * rank + 1], 'int32');
    const floats = Array.from(gatherConstantRows(x, layout).dataSync());
    const gathered = gatherConstantRows(labels, layout);
    const grad = tf.grad((t: Tensor) => tf.sum(tf.square(gatherConstantRows(t as tf.Tensor2D, layout))))(x);
    return { floats, ints: Array.from(gathered.dataSync()), intDtype: gathered.dtype, grad: Array.from(grad.dataSync()) };
  });
  const leaked = tf.memory().numTensors - before;
  const verify: LossCasesWorkerResult['verify'] = [];
  for (const path of spec.verify) {
    try {
      const report = runLossCaseOnRank(path, group);
      verify.push({ path, report, text: formatLossCaseReport(report) });
    } catch (err) {
      verify.push({ path, error: { name: (err as Error).name, message: (err as Error).message } });
    }
  }
  group.close();
  const result: LossCasesWorkerResult = { cases, variants, theta, constantRows, verify, leaked };
  return result;
});

/**
 * Worker: the losses with W real processes (tests/distributed/losses.test.ts).
 * - `variants`: on the case `fixture`, rank r takes rows r·B .. r·B+B−1 and evaluates each
 *   variant (the real losses and the wrong negative controls): its loss, its gradient on the
 *   local rows, and the DDP-averaged gradient of the shared map θ (all-reduce avg, as DDP).
 * - `cases`: `runLossCaseOnRank` on each path (the `verify --case FILE --devices W` worker
 *   logic), with its formatted report, or the error it threw.
 */
import { initEngine } from '../../../src/core/engine.js';
import { runLossCaseOnRank, formatLossCaseReport } from '../../../src/verify/loss-check.js';
import { loadLossCase } from '../../../src/verify/index.js';
import { tf } from '../../../src/core/tf.js';
import { evaluateVariant, type Variant, type VariantResult } from './loss-problems.js';
import { type BaseSpec, joinGroup, readArgs, run } from './common.js';

interface LossesSpec extends BaseSpec {
  fixture: string;
  variants: Variant[];
  cases: string[];
}

export interface LossesWorkerResult {
  variants: Record<string, VariantResult>;
  cases: Array<{ path: string; report?: unknown; text?: string; error?: { name: string; message: string } }>;
  leaked: number;
}

run(async () => {
  const { spec, rank } = readArgs<LossesSpec>();
  await initEngine('cpu');
  const group = await joinGroup(spec, rank);
  const W = group.worldSize;
  const c = loadLossCase(spec.fixture);
  const b = c.N / W;
  const before = tf.memory().numTensors;
  const variants: Record<string, VariantResult> = {};
  for (const v of spec.variants) {
    const res = evaluateVariant(v, c, rank * b, b, group);
    const avg = Float32Array.from(res.thetaGrad);
    group.allReduce(avg, 'avg'); // DDP: average parameter gradients over ranks
    variants[v] = { ...res, thetaGrad: Array.from(avg) };
  }
  const leaked = tf.memory().numTensors - before;
  const cases: LossesWorkerResult['cases'] = [];
  for (const path of spec.cases) {
    try {
      const report = runLossCaseOnRank(path, group);
      cases.push({ path, report, text: formatLossCaseReport(report) });
    } catch (err) {
      cases.push({ path, error: { name: (err as Error).name, message: (err as Error).message } });
    }
  }
  group.close();
  const result: LossesWorkerResult = { variants, cases, leaked };
  return result;
});

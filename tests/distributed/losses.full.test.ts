/**
 * Every loss of the zoo with W = 2, 3 and 4 real processes over the Gloo addon, DIFFERENT data
 * per rank (docs/design.md contracts 2-4, 7): rank r holds its slice of every batch input of
 * each float64 PyTorch case (tests/fixtures/losses/cases.json, scripts/gen_loss_cases.py) and
 * all of the other inputs and of the state (queues, the DINO centre, W-MSE's permutations).
 * One launch per W.
 *
 * For every case and W: each rank's loss equals the case's per-rank loss, the mean over ranks
 * the global loss, each rank's gradient on its slice divided by W the slice of the global
 * gradient, each rank's outputs (its rows of the Sinkhorn assignments) and state after (the
 * one-process DINO centre) the global ones, all to 1e-5 (gradients and outputs relative to the
 * largest reference entry); detached inputs and state get exactly zero on every rank; the
 * ranks' losses differ (different data) except where every rank returns the global loss; the
 * collectives are the ones the doc comments state. For SimCLR, Barlow Twins, BYOL and VICReg
 * with every input mapped through a shared θ, the DDP-averaged θ gradient equals the
 * one-process one. Negative controls: the same checks reject NT-Xent with the positive/self
 * columns at i instead of rank·B + i, NT-Xent with a gather whose backward keeps only the local
 * slice, solo-learn's Barlow Twins, NNCLR with its targets at i, DCLW with lightly's local
 * softmax, and every loss with its global statistic over the local batch (Sinkhorn, DINO centre,
 * MAE mean, W-MSE whitening, VIbCReg, All4One, DeepCluster v2's mean, SimDINO's coding rate,
 * LeJEPA's SIGReg), and LeJEPA's SIGReg sums all-reduced without their gradient (lightly #1920:
 * right values, each rank's gradient short of the other ranks' share). Also gatherConstantRows,
 * no leaked tensors, and the per-rank logic of `verify --case` (runLossCaseOnRank): every case
 * passes with the same report on every rank, and a case whose N W does not divide is a UserError.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { caseErrors, errorsPass, loadLossCases, type CaseErrors, type LossCase, type LossCaseReport } from '../../src/verify/index.js';
import { CASES_FILE, EXAMPLE_CASE, useCpuEngine } from '../losses/helpers.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import { CASE_CONTROLS } from './workers/case-controls.js';
import type { CollectiveCounts } from './workers/counting.js';
import { evaluateVariant, LOSS_NAMES, VARIANT_CASE, type Variant, type VariantResult } from './workers/loss-problems.js';
import type { LossCasesWorkerResult } from './workers/loss-cases.js';

const TOL = 1e-5;

/** Collectives per rank and case, forward and backward together, as the doc comments state. */
const EXPECTED_COLLECTIVES: Record<string, Omit<CollectiveCounts, 'broadcast'>> = {
  moco: { allGather: 0, reduceScatter: 0, allReduce: 0 },
  mocov3: { allGather: 1, reduceScatter: 0, allReduce: 0 },
  simsiam: { allGather: 0, reduceScatter: 0, allReduce: 0 },
  nnclr: { allGather: 1, reduceScatter: 1, allReduce: 0 },
  supcon: { allGather: 2, reduceScatter: 1, allReduce: 0 },
  ressl: { allGather: 0, reduceScatter: 0, allReduce: 0 },
  dcl: { allGather: 2, reduceScatter: 2, allReduce: 0 },
  dclw: { allGather: 3, reduceScatter: 2, allReduce: 0 },
  // Sinkhorn per global crop (2): 1 all-reduce max + 3 all-reduce sums (one per iteration).
  swav: { allGather: 0, reduceScatter: 0, allReduce: 8 },
  'swav-queue': { allGather: 0, reduceScatter: 0, allReduce: 8 },
  dino: { allGather: 0, reduceScatter: 0, allReduce: 1 },
  mae: { allGather: 0, reduceScatter: 0, allReduce: 1 },
  wmse: { allGather: 1, reduceScatter: 1, allReduce: 0 },
  vibcreg: { allGather: 0, reduceScatter: 0, allReduce: 4 },
  all4one: { allGather: 0, reduceScatter: 0, allReduce: 4 },
  // Two halves, each one gather forward and its reduce-scatter backward.
  'all4one-centroid': { allGather: 2, reduceScatter: 2, allReduce: 0 },
  fastsiam: { allGather: 0, reduceScatter: 0, allReduce: 0 },
  // The batch part of C: one all-reduce forward, one backward.
  tico: { allGather: 0, reduceScatter: 0, allReduce: 2 },
  // The Gram matrix summed exactly (one all-gather forward), the incoming gradient summed (one all-reduce backward).
  mmcr: { allGather: 1, reduceScatter: 0, allReduce: 1 },
  // The global crops' Gram matrices [G, K, K]: one all-reduce forward, one backward.
  simdino: { allGather: 0, reduceScatter: 0, allReduce: 2 },
  // SIGReg's cos and sin sums [V, 2, S, T]: one all-reduce forward, one backward.
  lejepa: { allGather: 0, reduceScatter: 0, allReduce: 2 },
  // The number of target patches: one all-reduce forward, none backward.
  ijepa: { allGather: 0, reduceScatter: 0, allReduce: 1 },
  // Sinkhorn-Knopp of the targets: 1 all-reduce max + 3 sums; ME-MAX's anchor probability sums [K]: one forward, one backward.
  msn: { allGather: 0, reduceScatter: 0, allReduce: 6 },
  // Column sums and centred Gram matrices: of the embeddings, then of every matched location: 4 forward, 4 backward.
  vicregl: { allGather: 0, reduceScatter: 0, allReduce: 8 },
  // The [CLS] centre's and the patch centre's sums: one all-reduce each, none in backward.
  ibot: { allGather: 0, reduceScatter: 0, allReduce: 2 },
  // The normalised rows: one all-gather forward, its reduce-scatter backward.
  koleo: { allGather: 1, reduceScatter: 1, allReduce: 0 },
  // Sinkhorn-Knopp of the [CLS] and of the masked patches (1 max + 3 sums each, none backward); KoLeo of each global crop.
  dinov2: { allGather: 2, reduceScatter: 2, allReduce: 8 },
};

/** Cases whose every rank returns the global loss (the others differ between ranks). */
const SAME_ON_EVERY_RANK = new Set(['barlow', 'all4one']);

/** What each negative control of a whole case must get wrong (and, where the loss has no collective of its own, what it keeps right). */
const CONTROL_EXPECTATIONS: Record<string, (e: CaseErrors) => boolean> = {
  'nnclr-local-targets': (e) => e.rankLoss! > 1e-2 && Math.max(e.loss, e.grad) > 1e-2,
  'dclw-local-softmax': (e) => e.rankLoss! > 1e-2 && Math.max(e.loss, e.grad) > 1e-2,
  'swav-local-sinkhorn': (e) => e.outputs! > 0.1 && e.rankLoss! > 1e-2,
  // The loss itself needs no collective: only the centre is off.
  'dino-local-centre': (e) => e.stateAfter! > 1e-2 && e.rankLoss! <= TOL && e.grad <= TOL,
  'mae-local-mean': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  'wmse-local-whitening': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  'vibcreg-local-stats': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  'all4one-local-stats': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  'all4one-centroid-local-candidates': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  // Head 1 has no cluster on the first half of the batch: per-rank means weigh the ranks wrongly.
  'deepclusterv2-local-mean': (e) => e.loss > 1e-3,
  'simdino-local-coding-rate': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  'lejepa-local-stats': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  // lightly #1920: the values are right, only the gradient (SIGReg's share, 1/W of it) is off.
  'lejepa-no-grad-all-reduce': (e) => e.rankLoss! <= TOL && e.loss <= TOL && e.grad > 1e-2,
  'msn-local-statistics': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  'vicregl-local-stats': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  // DINOv2's per-GPU KoLeo: other neighbours, other distances.
  'koleo-local-neighbours': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
  // Both Sinkhorn-Knopp balancings and KoLeo's neighbours of each rank's own rows.
  'dinov2-local-statistics': (e) => e.rankLoss! > 1e-2 && e.grad > 1e-2,
};

const cases = loadLossCases(CASES_FILE).cases;
const byName = (name: string): LossCase => cases.find((c) => c.name === name)!;

/** max |a − b| / scale (the largest |entry| of the whole reference). */
function errorOf(a: ArrayLike<number>, b: ArrayLike<number>, scale: number): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  if (Number.isNaN(diff)) return Infinity;
  return scale > 0 ? diff / scale : diff === 0 ? 0 : Infinity;
}

const maxAbs = (a: ArrayLike<number>) => Array.from(a).reduce((m, x) => Math.max(m, Math.abs(x)), 0);

interface ThetaErrors {
  /** max over ranks and inputs of the local-row gradient / W against the one-process rows. */
  grad: number;
  /** max over ranks of the DDP-averaged θ gradient against the one-process one. */
  theta: number;
  /** max over ranks of |loss_r − per_rank[W][r]| / |per_rank[W][r]| (the case's). */
  rankLoss: number;
  /** |mean_r loss_r − L| / |L| (L = the one-process float32 loss). */
  meanLoss: number;
}

/** A θ variant's W ranks (`results`) against the one-process answer `ref` on the case `c` of its loss. */
function thetaCheck(c: LossCase, results: VariantResult[], ref: VariantResult): ThetaErrors {
  const W = results.length;
  const e: ThetaErrors = { grad: 0, theta: 0, rankLoss: 0, meanLoss: 0 };
  ref.grads.forEach((full, i) => {
    const rowLen = full.length / W;
    results.forEach((res, r) => {
      e.grad = Math.max(
        e.grad,
        errorOf(
          res.grads[i]!.map((g) => g / W),
          full.slice(r * rowLen, (r + 1) * rowLen),
          maxAbs(full),
        ),
      );
    });
  });
  const perRank = c.expected.perRank[W]!;
  results.forEach((res, r) => {
    e.theta = Math.max(e.theta, errorOf(res.thetaGrad, ref.thetaGrad, maxAbs(ref.thetaGrad)));
    e.rankLoss = Math.max(e.rankLoss, Math.abs(res.value - perRank[r]!) / Math.abs(perRank[r]!));
  });
  e.meanLoss = Math.abs(results.reduce((s, res) => s + res.value, 0) / W - ref.value) / Math.abs(ref.value);
  for (const k of Object.keys(e) as Array<keyof ThetaErrors>) if (Number.isNaN(e[k])) e[k] = Infinity;
  return e;
}

describe('distributed/losses: every loss of the zoo with W real processes equals the float64 global loss', function () {
  this.timeout(300_000);

  before(async () => {
    loadGlooAddon();
    await useCpuEngine();
  });

  for (const W of [2, 3, 4]) {
    describe(`W = ${W}`, () => {
      let outcomes: LossCasesWorkerResult[] = [];
      // W-MSE's per-rank whitening needs more rows per rank than D = 6: not at W = 4 (B = 6).
      const controls = Object.keys(CASE_CONTROLS).filter((v) => !(v === 'wmse-local-whitening' && W === 4));

      before(async () => {
        const dir = freshDir(`loss-cases-w${W}`);
        try {
          const spec = {
            dir,
            worldSize: W,
            rendezvous: pathToFileURL(join(dir, 'store')).href,
            timeoutMs: 60_000,
            casesFile: CASES_FILE,
            controls,
            verify: [CASES_FILE, EXAMPLE_CASE],
          };
          const raw = await runRanks('loss-cases', spec, 240_000);
          expectAllOk(raw);
          outcomes = raw.map((o) => o.result as LossCasesWorkerResult);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });

      for (const c of cases) {
        it(`${c.name}: per-rank losses, their mean, the slice gradients / W, outputs and state after match (1e-5)`, () => {
          const results = outcomes.map((o) => o.cases[c.name]!);
          const e = caseErrors(c, results);
          assert.ok(e.rankLoss !== undefined && e.rankLoss <= TOL, `per-rank loss error ${e.rankLoss}`);
          assert.ok(e.loss <= TOL, `mean of per-rank losses vs global loss ${e.loss}`);
          assert.ok(e.grad <= TOL, `slice gradient error ${e.grad}`);
          assert.ok((e.outputs ?? 0) <= TOL && (e.stateAfter ?? 0) <= TOL, `outputs ${e.outputs}, state after ${e.stateAfter}`);
          assert.deepEqual(e.detached, [], 'detached inputs or state with a non-zero gradient');
          const values = results.map((r) => r.value);
          assert.equal(new Set(values).size, SAME_ON_EVERY_RANK.has(c.name) ? 1 : W, `per-rank losses ${values}`);
          const expected = EXPECTED_COLLECTIVES[c.name];
          for (const res of results) {
            const { broadcast, ...counts } = res.collectives;
            assert.equal(broadcast, 0);
            if (expected) assert.deepEqual(counts, expected, 'collectives');
          }
        });
      }

      it('SimCLR, Barlow Twins, BYOL, VICReg: the DDP-averaged gradient of a shared θ equals the one-process one (1e-5)', () => {
        for (const name of LOSS_NAMES) {
          const c = byName(name);
          const e = thetaCheck(
            c,
            outcomes.map((o) => o.theta[name]!),
            evaluateVariant(name, c, 0, 1, undefined),
          );
          assert.ok(Math.max(e.grad, e.theta, e.rankLoss, e.meanLoss) <= TOL, `${name}: ${JSON.stringify(e)}`);
        }
      });

      it('negative controls: a wrong positive offset, a local-slice gather backward and solo-learn’s Barlow Twins are caught', () => {
        const control = (v: Variant) =>
          thetaCheck(
            byName(VARIANT_CASE[v]),
            outcomes.map((o) => o.theta[v]!),
            evaluateVariant(VARIANT_CASE[v], byName(VARIANT_CASE[v]), 0, 1, undefined),
          );
        const offset = control('simclr-local-offset');
        assert.ok(offset.rankLoss > 1e-2 && Math.max(offset.grad, offset.theta, offset.meanLoss) > 1e-2, `wrong offset not caught: ${JSON.stringify(offset)}`);
        const slice = control('simclr-local-slice-gather');
        // Values are right (the forward is the same); only the gradient is biased.
        assert.ok(slice.rankLoss <= TOL && slice.meanLoss <= TOL, JSON.stringify(slice));
        assert.ok(slice.grad > 1e-2 && slice.theta > 1e-2, `local-slice gather not caught: ${JSON.stringify(slice)}`);
        const solo = control('barlow-solo-learn');
        assert.ok(solo.grad > 1e-2 && solo.theta > 1e-2, `solo-learn Barlow not caught: ${JSON.stringify(solo)}`);
      });

      it('negative controls: NNCLR targets at i, DCLW local softmax, and every global statistic over the local batch are caught', () => {
        assert.deepEqual(Object.keys(CASE_CONTROLS).sort(), Object.keys(CONTROL_EXPECTATIONS).sort());
        for (const v of controls) {
          const e = caseErrors(
            byName(CASE_CONTROLS[v]!.against),
            outcomes.map((o) => o.variants[v]!),
          );
          assert.ok(!errorsPass(e, TOL), `${v} passes the check`);
          assert.ok(CONTROL_EXPECTATIONS[v]!(e), `${v} not caught as expected: ${JSON.stringify(e)}`);
        }
      });

      it('gatherConstantRows: rows of every rank in rank order, int32 labels exact, zero gradient', () => {
        const floats: number[] = [];
        const ints: number[] = [];
        for (let r = 0; r < W; r++) {
          floats.push(100 * r, 100 * r + 1, 100 * r + 2, 100 * r + 10, 100 * r + 11, 100 * r + 12);
          ints.push(10 * r, 10 * r + 1);
        }
        for (const o of outcomes) {
          assert.deepEqual(o.constantRows, { floats, ints, intDtype: 'int32', grad: [0, 0, 0, 0, 0, 0] });
        }
      });

      it('allocates no tensors it does not free (every case and control, forward and backward)', () => {
        outcomes.forEach((o, r) => assert.equal(o.leaked, 0, `rank ${r} leaked ${o.leaked} tensors`));
      });

      it('runLossCaseOnRank (verify --case --devices W): every case passes, the same report on every rank; N not divisible by W is a UserError', () => {
        [CASES_FILE, EXAMPLE_CASE].forEach((path, k) => {
          const answers = outcomes.map((o) => o.verify[k]!);
          const N = Math.min(...loadLossCases(path).cases.map((c) => c.N));
          if (N % W !== 0) {
            for (const a of answers) {
              assert.equal(a.error?.name, 'UserError', JSON.stringify(a));
              assert.match(a.error!.message, new RegExp(`N = ${N}\\b.*W = ${W}\\b`));
            }
            return;
          }
          const reports = answers.map((a) => {
            assert.ok(a.report, `${path}: ${JSON.stringify(a.error)}`);
            return a.report;
          });
          reports.forEach((rep, r) => assert.equal(rep.rank, r));
          const strip = (rep: LossCaseReport) => ({ ...rep, rank: 0 });
          for (const rep of reports) assert.deepEqual(strip(rep), strip(reports[0]!));
          const text = answers[0]!.text!;
          assert.ok(reports[0]!.passed, text);
          for (const res of reports[0]!.results) {
            assert.equal(res.status, 'passed', text);
            assert.equal(res.rankValues?.length, W);
          }
          const recorded = path === CASES_FILE; // the /1 example records per-rank losses for W = 1 only
          assert.equal(text.split('\n').filter((l) => l.includes('per-rank loss error')).length, recorded ? reports[0]!.results.length : 0, text);
          assert.match(text.split('\n').at(-1)!, new RegExp(`^PASSED: ${reports[0]!.results.length} passed, 0 failed, 0 skipped$`));
        });
      });
    });
  }
});

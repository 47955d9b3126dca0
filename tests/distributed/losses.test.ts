/**
 * The losses with W real processes over the Gloo addon, DIFFERENT data per rank (docs/design.md
 * contracts 2-4): rank r holds rows r·B.. of a float64 PyTorch case
 * (tests/fixtures/losses, which record per-rank losses for W = 2, 3, 4).
 *
 * For every loss and W: each rank's gradient on its local rows divided by W, and the
 * DDP-averaged gradient of a shared map θ, equal the one-process gradients of the global loss
 * computed here on the concatenated batch (relative 1e-5 of the largest entry); the per-rank
 * losses equal the case's `per_rank_loss`. Negative controls: the same check rejects NT-Xent
 * with the positive/self columns at i instead of rank·B + i, NT-Xent with a gather whose
 * backward keeps only the local slice, and solo-learn's Barlow Twins. And the per-rank logic
 * of `ssl-train verify --case FILE --devices W` (runLossCaseOnRank) passes the example case
 * for W = 1, 2, 3 and the generated cases for their W.
 */
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { UserError } from '../../src/core/errors.js';
import { tf } from '../../src/core/tf.js';
import { formatLossCaseReport, runLossCaseOnRank } from '../../src/verify/loss-check.js';
import { loadLossCase, type LossCase, type LossCaseReport } from '../../src/verify/index.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { EXAMPLE_CASE, FIXTURE_DIR } from '../losses/helpers.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import { evaluateVariant, inputNames, LOSS_NAMES, WRONG_VARIANTS, type Variant, type VariantResult } from './workers/loss-problems.js';
import type { LossesWorkerResult } from './workers/losses.js';

const FIXTURES: Record<number, string> = {
  2: join(FIXTURE_DIR, 'case-n12-d8-s1-t0.1-w2.json'),
  3: join(FIXTURE_DIR, 'case-n12-d5-s2-t0.5-w3.json'),
  4: join(FIXTURE_DIR, 'case-n12-d16-s3-t0.2-w4.json'),
};

const TOL = 1e-5;

/** max |a − b| / scale, where scale is the largest |entry| of the whole reference. */
function errorOf(a: ArrayLike<number>, b: ArrayLike<number>, scale: number): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  if (Number.isNaN(diff)) return Infinity;
  return scale > 0 ? diff / scale : diff === 0 ? 0 : Infinity;
}

function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
}

interface CheckErrors {
  /** max over ranks and inputs of the local-row gradient / W against the reference rows. */
  grad: number;
  /** max over ranks of the DDP-averaged θ gradient against the one-process one. */
  theta: number;
  /** max over ranks of |loss_r − per_rank_loss[r]| / |per_rank_loss[r]|. */
  rankLoss: number;
  /** |mean_r loss_r − L| / |L| (L = the one-process float32 loss). */
  meanLoss: number;
}

/**
 * The check of one loss: `results[r]` is rank r's answer (from the worker); `ref` the
 * one-process answer on all N rows; `perRank` the case's per-rank losses.
 */
function check(c: LossCase, name: string, results: VariantResult[], ref: VariantResult, perRank: number[]): CheckErrors {
  const W = results.length;
  const b = c.N / W;
  const rowLen = b * c.D;
  const errors: CheckErrors = { grad: 0, theta: 0, rankLoss: 0, meanLoss: 0 };
  inputNames(name as Variant).forEach((_, i) => {
    const full = ref.grads[i]!;
    const scale = maxAbs(full);
    results.forEach((res, r) => {
      const mine = res.grads[i]!.map((g) => g / W);
      errors.grad = Math.max(errors.grad, errorOf(mine, full.slice(r * rowLen, (r + 1) * rowLen), scale));
    });
  });
  const thetaScale = maxAbs(ref.thetaGrad);
  results.forEach((res, r) => {
    errors.theta = Math.max(errors.theta, errorOf(res.thetaGrad, ref.thetaGrad, thetaScale));
    errors.rankLoss = Math.max(errors.rankLoss, Math.abs(res.value - perRank[r]!) / Math.abs(perRank[r]!));
  });
  const mean = results.reduce((s, res) => s + res.value, 0) / W;
  errors.meanLoss = Math.abs(mean - ref.value) / Math.abs(ref.value);
  for (const k of Object.keys(errors) as Array<keyof CheckErrors>) {
    if (Number.isNaN(errors[k])) errors[k] = Infinity;
  }
  return errors;
}

function worst(e: CheckErrors): number {
  return Math.max(e.grad, e.theta, e.rankLoss, e.meanLoss);
}

describe('distributed/losses: every loss with W real processes equals the one-process global loss', function () {
  this.timeout(120_000);

  before(() => {
    loadGlooAddon();
  });

  for (const W of [2, 3, 4]) {
    describe(`W = ${W} (case ${FIXTURES[W]!.split('/').pop()})`, () => {
      let outcomes: LossesWorkerResult[] = [];
      let c: LossCase;
      const refs: Record<string, VariantResult> = {};
      // Cases for runLossCaseOnRank: the generated case of this W, another generated case
      // (per-rank losses recorded for a different W) at W = 2, and the example case (N = 6).
      const cases = W === 2 ? [FIXTURES[2]!, FIXTURES[4]!, EXAMPLE_CASE] : [FIXTURES[W]!, EXAMPLE_CASE];

      before(async () => {
        c = loadLossCase(FIXTURES[W]!);
        assert.equal(c.distributed?.worldSize, W);
        const dir = freshDir(`losses-w${W}`);
        try {
          const raw = await runRanks(
            'losses',
            {
              dir,
              worldSize: W,
              rendezvous: pathToFileURL(join(dir, 'store')).href,
              timeoutMs: 30_000,
              fixture: FIXTURES[W],
              variants: [...LOSS_NAMES, ...WRONG_VARIANTS],
              cases,
            },
            90_000,
          );
          expectAllOk(raw);
          outcomes = raw.map((o) => o.result as LossesWorkerResult);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
        for (const name of LOSS_NAMES) refs[name] = evaluateVariant(name, c, 0, c.N, undefined);
      });

      for (const name of LOSS_NAMES) {
        it(`${name}: local-row gradients / W, DDP-averaged θ gradient and per-rank losses match (1e-5)`, () => {
          const results = outcomes.map((o) => o.variants[name]!);
          const e = check(c, name, results, refs[name]!, c.distributed!.perRankLoss[name]!);
          assert.ok(e.grad <= TOL, `${name}: local-row gradient error ${e.grad}`);
          assert.ok(e.theta <= TOL, `${name}: DDP-averaged θ gradient error ${e.theta}`);
          assert.ok(e.rankLoss <= TOL, `${name}: per-rank loss error ${e.rankLoss}`);
          assert.ok(e.meanLoss <= TOL, `${name}: mean of per-rank losses vs global loss ${e.meanLoss}`);
          // Different data per rank really gives different per-rank losses (except Barlow,
          // whose per-rank loss is the global loss by convention).
          const values = results.map((r) => r.value);
          if (name === 'barlow')
            assert.ok(
              values.every((v) => v === values[0]),
              `barlow: ${values}`,
            );
          else assert.ok(new Set(values).size === W, `${name}: per-rank losses ${values}`);
          if (name === 'byol') {
            // z1, z2 are detached: exactly zero gradient on every rank.
            for (const res of results) for (const g of res.grads.slice(2)) assert.ok(g.every((x) => x === 0));
          }
        });
      }

      it('negative controls: the same check rejects a wrong positive offset, a local-slice gather backward and solo-learn’s Barlow Twins', () => {
        const control = (variant: Variant, as: string) =>
          check(
            c,
            as,
            outcomes.map((o) => o.variants[variant]!),
            refs[as]!,
            c.distributed!.perRankLoss[as]!,
          );
        const offset = control('simclr-local-offset', 'simclr');
        assert.ok(worst(offset) > 1e-2, `wrong offset not caught: ${JSON.stringify(offset)}`);
        assert.ok(offset.rankLoss > 1e-2, `wrong offset: per-rank losses should be off: ${JSON.stringify(offset)}`);
        const slice = control('simclr-local-slice-gather', 'simclr');
        // Values are right (the forward is the same); only the gradient is biased.
        assert.ok(slice.rankLoss <= TOL && slice.meanLoss <= TOL, JSON.stringify(slice));
        assert.ok(slice.grad > 1e-2 && slice.theta > 1e-2, `local-slice gather not caught: ${JSON.stringify(slice)}`);
        const solo = control('barlow-solo-learn', 'barlow');
        assert.ok(solo.grad > 1e-2 && solo.theta > 1e-2, `solo-learn Barlow not caught: ${JSON.stringify(solo)}`);
      });

      it('allocates no tensors it does not free (all variants, forward and backward)', () => {
        outcomes.forEach((o, r) => assert.equal(o.leaked, 0, `rank ${r} leaked ${o.leaked} tensors`));
      });

      it('runLossCaseOnRank (verify --devices W) passes the cases and returns the same report on every rank', () => {
        cases.forEach((path, k) => {
          const answers = outcomes.map((o) => o.cases[k]!);
          const N = loadLossCase(path).N;
          if (N % W !== 0) {
            for (const a of answers) {
              assert.equal(a.error?.name, 'UserError', JSON.stringify(a));
              assert.match(a.error!.message, new RegExp(`N = ${N}\\b.*W = ${W}\\b`));
            }
            return;
          }
          const reports = answers.map((a) => {
            assert.ok(a.report, `${path}: ${JSON.stringify(a.error)}`);
            return a.report as LossCaseReport;
          });
          reports.forEach((rep, r) => assert.equal(rep.rank, r));
          const strip = (rep: LossCaseReport) => ({ ...rep, rank: 0 });
          for (const rep of reports) assert.deepEqual(strip(rep), strip(reports[0]!));
          const report = reports[0]!;
          assert.equal(report.worldSize, W);
          assert.equal(report.rowsPerRank, N / W);
          assert.ok(report.passed, answers[0]!.text);
          assert.deepEqual(report.results.map((r) => r.name).sort(), [...LOSS_NAMES].sort());
          const recordsW = report.caseWorldSize === W;
          for (const res of report.results) {
            assert.equal(res.status, 'passed', answers[0]!.text);
            assert.ok(res.lossError! <= 1e-4 && res.gradError! <= 1e-4, answers[0]!.text);
            assert.equal(res.rankValues?.length, W);
            if (recordsW) assert.ok(res.rankLossError! <= 1e-4, answers[0]!.text);
            else assert.equal(res.rankLossError, undefined);
          }
          const text = answers[0]!.text!;
          assert.equal(text.split('\n').length, 2 + LOSS_NAMES.length, text);
          assert.match(text, new RegExp(`W = ${W} processes`));
          assert.match(text.split('\n').at(-1)!, /^PASSED: 4 passed, 0 failed, 0 skipped$/);
          if (!recordsW) assert.match(text, /per-rank losses not compared/);
        });
      });
    });
  }
});

describe('distributed/loss-check: runLossCaseOnRank and its report (one process)', () => {
  it('passes the example case at W = 1', () => {
    const report = runLossCaseOnRank(EXAMPLE_CASE, new SingleProcessGroup());
    assert.ok(report.passed, formatLossCaseReport(report));
    assert.equal(report.worldSize, 1);
    assert.equal(report.rowsPerRank, 6);
    for (const r of report.results) {
      assert.equal(r.status, 'passed');
      assert.ok(r.rankLossError !== undefined && r.rankLossError <= 1e-4);
    }
  });

  it('reports failed and skipped losses, one line each, with the reason', () => {
    const dir = freshDir('loss-check');
    try {
      const json = JSON.parse(readFileSync(EXAMPLE_CASE, 'utf8')) as {
        losses: Record<string, { loss: number; grad: Record<string, number[][]> }>;
      };
      json.losses.barlow!.grad.z1![2]![3]! *= 1.05;
      json.losses.mystery = { loss: 1, grad: { z1: json.losses.simclr!.grad.z1! } };
      const path = join(dir, 'edited.json');
      writeFileSync(path, JSON.stringify(json));
      const report = runLossCaseOnRank(path, new SingleProcessGroup());
      const text = formatLossCaseReport(report);
      assert.equal(report.passed, false);
      const lines = text.split('\n');
      assert.equal(lines.length, 2 + 5, text);
      assert.match(
        lines.find((l) => l.trim().startsWith('barlow'))!,
        /failed .*gradient error [0-9.e+-]+/,
      );
      assert.match(
        lines.find((l) => l.trim().startsWith('simclr'))!,
        /passed .*loss .* error/,
      );
      assert.match(
        lines.find((l) => l.trim().startsWith('mystery'))!,
        /skipped +not implemented by ssl-zoo/,
      );
      assert.match(lines.at(-1)!, /^FAILED: 3 passed, 1 failed, 1 skipped$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('gives UserErrors for a missing file and a bad tolerance', () => {
    assert.throws(
      () => runLossCaseOnRank('/nonexistent/case.json', new SingleProcessGroup()),
      (err: unknown) => {
        assert.ok(err instanceof UserError);
        assert.match(err.message, /\/nonexistent\/case\.json: cannot read the file \(ENOENT\)/);
        return true;
      },
    );
    assert.throws(() => runLossCaseOnRank(EXAMPLE_CASE, new SingleProcessGroup(), 0), /tolerance: 0/);
  });

  it('leaves no tensors behind', () => {
    runLossCaseOnRank(EXAMPLE_CASE, new SingleProcessGroup());
    const before = tf.memory().numTensors;
    runLossCaseOnRank(EXAMPLE_CASE, new SingleProcessGroup());
    assert.equal(tf.memory().numTensors, before);
  });
});

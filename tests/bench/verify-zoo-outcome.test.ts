/**
 * What `bench:verify-zoo` reads from a verify run (scripts/bench/verify-outcome.ts), on reports
 * written by verify's own formatter: the worst ratio, the queue and switch counts, and a run
 * killed before its verdict (a rank or verify itself ended by a signal) counted apart from the
 * failures in the seeds table.
 */
import { strict as assert } from 'node:assert';
import { failureReport } from '../../src/distributed/launcher.js';
import type { VerifyResult } from '../../src/verify/harness.js';
import { formatVerifyResult } from '../../src/verify/report.js';
import { runLine, seedsTable, verifyRun } from '../../scripts/bench/verify-outcome.js';
import { oneStepResult } from '../verify/results.js';

/** nnclr's report of one step: its queue column, `differ` nearest-neighbour switches (margin 1e-6, bound 1e-5 or `bound`) and 3 ReLU branches switched. */
function nnclrReport(differ: number, bound = 1e-5, passed = true): string {
  const margin = 1e-6;
  const result: VerifyResult = {
    ...oneStepResult(
      {
        decisions: {
          kind: 'nearest-neighbour',
          total: 256,
          differ,
          beyond: margin > bound ? differ : 0,
          largestMargin: differ > 0 ? margin : 0,
          bound,
          closestTie: margin,
          switches: [],
          matched: true,
        },
        branches: { total: 40, differ: 3, beyond: 0, largestMargin: 2e-7, bound: 1e-5, switches: [], matched: true },
      },
      passed ? 0.31 : 1.7,
    ),
    passed,
  };
  result.steps[0]!.queues = { value: 2e-6, bound: 1e-5, tensor: 'queue' };
  return formatVerifyResult(result, 'nnclr');
}

describe('bench:verify-zoo: what a verify run reports', () => {
  it('reads a passed run: its worst ratio, queue ratio, decisions and ReLU branches switched within round-off', () => {
    const run = verifyRun('nnclr', 2, 0, { status: 0, signal: null, stdout: nnclrReport(2), stderr: '' }, 61.4);
    const { worstQueue, ...rest } = run;
    assert.ok(Math.abs(worstQueue! - 0.2) < 1e-12, `queues ${worstQueue}`);
    assert.deepEqual(rest, {
      method: 'nnclr',
      devices: 2,
      seed: 0,
      passed: true,
      worst: 0.31,
      switched: 2,
      decisionFailures: 0,
      branchesSwitched: 3,
      seconds: 61,
    });
    assert.equal(runLine(run), 'nnclr --devices 2 --seed 0: PASSED worst 0.31, queues 0.20, 2 decision(s) switched, 3 ReLU branch(es) switched (61 s)');
  });

  it('reads a decision failure as a failure with its count', () => {
    const stdout = nnclrReport(4, 1e-8, false);
    const run = verifyRun('nnclr', 3, 1, { status: 1, signal: null, stdout, stderr: 'ssl-train: rank 0 failed: exited with code 1\n' }, 70);
    assert.equal(run.passed, false);
    assert.equal(run.killed, undefined);
    assert.equal(run.decisionFailures, 4);
    assert.equal(run.worst, 1.7);
    assert.match(runLine(run), /: FAILED worst 1\.7,/);
  });

  it('a rank killed by SIGKILL (the launcher names it) or verify itself killed: no verdict, counted apart from the failures', () => {
    const oom = `ssl-train: note: the default batch size 256 is not a multiple of 3 ranks; using 255\n${failureReport(1, null, 'SIGKILL', '')}\n`;
    const rankKilled = verifyRun('vicregl', 3, 0, { status: 1, signal: null, stdout: '', stderr: oom }, 56);
    assert.equal(rankKilled.passed, false);
    assert.equal(rankKilled.killed, 'rank 1 killed by SIGKILL');
    assert.equal(rankKilled.worst, null);
    assert.match(runLine(rankKilled), /^vicregl --devices 3 --seed 0: KILLED before a verdict \(rank 1 killed by SIGKILL\) worst \?/);
    const verifyKilled = verifyRun('vicregl', 3, 1, { status: null, signal: 'SIGKILL', stdout: '', stderr: '' }, 40);
    assert.equal(verifyKilled.killed, 'verify killed by SIGKILL');
    const timedOut = verifyRun('vicregl', 3, 4, { status: null, signal: 'SIGTERM', stdout: '', stderr: '', timedOut: true }, 1800);
    assert.equal(timedOut.killed, 'verify stopped at its time limit by SIGTERM');
    const failed = verifyRun(
      'vicregl',
      3,
      2,
      { status: 1, signal: null, stdout: nnclrReport(0, 1e-5, false), stderr: failureReport(0, 1, null, '') ?? '' },
      50,
    );
    const passed = verifyRun('vicregl', 3, 3, { status: 0, signal: null, stdout: nnclrReport(0), stderr: '' }, 50);
    assert.deepEqual(seedsTable([rankKilled, verifyKilled, failed, passed]), [
      { method: 'vicregl', devices: 3, seeds: [0, 1, 2, 3], worst: null, failedSeeds: [2], killedSeeds: [0, 1] },
    ]);
    assert.deepEqual(seedsTable([failed, passed]), [{ method: 'vicregl', devices: 3, seeds: [2, 3], worst: 1.7, failedSeeds: [2], killedSeeds: [] }]);
  });
});

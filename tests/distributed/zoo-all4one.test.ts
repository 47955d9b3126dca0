/**
 * All4One with W real processes (Gloo, different data per rank): `ssl-train verify` on 2 and 3
 * ranks (loss, gradients, parameters and the support set against one process on the global
 * batch) with a support set small enough to wrap around within the 3 steps; a 2-rank training
 * run whose checkpoint, support set included, is the one-process run's; and the negative
 * control, a per-rank support set, which verify must fail.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { SMALL_PREDICTOR, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import { runCli, tempDir } from '../helpers/run.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';

/** 40 rows: a batch of 24 fills slots 0-23, then 24-39 and 0-7 (wrapping around), then 8-31. */
const ARGS = [...SMALL_RUN, ...SMALL_PROJECTOR, ...SMALL_PREDICTOR, '--method-arg', 'queueSize=40', '--batch-size', '24'];

function train(devices: number): string {
  const runDir = join(tempDir(), 'run');
  const args = [...ARGS, '--method', 'all4one', '--devices', String(devices), '--max-steps', '3', '--epochs', '2', '--warmup-epochs', '0', '--run-dir', runDir];
  const { status, stderr } = runCli(args, 120_000);
  assert.equal(status, 0, stderr);
  return runDir;
}

describe('All4One: W ranks equal one process on the global batch', function () {
  this.timeout(300_000);

  for (const devices of [2, 3]) {
    it(`ssl-train verify --devices ${devices} passes (loss, gradients, parameters, queue over 3 steps)`, () => {
      const { status, stdout, stderr } = runCli(['verify', ...ARGS, '--method', 'all4one', '--devices', String(devices), '--steps', '3'], 240_000);
      assert.equal(status, 0, stdout + stderr);
      const verdict = /PASSED: the worst difference is ([0-9.]+) of its bound/.exec(stdout);
      assert.ok(verdict, stdout);
      const header = stdout.split('\n').find((l) => l.startsWith('step '));
      assert.ok(header && /\bqueues\b/.test(header), stdout);
      console.log(`      all4one, ${devices} ranks: ${verdict[0]}`);
    });
  }

  it('a 2-rank training run ends 3 steps with the one-process parameters, buffers and support set', () => {
    const single = checkpointTensors(train(1));
    const ddp = checkpointTensors(train(2));
    assert.ok(
      Object.keys(single).some((n) => n.includes('queue.bank')),
      'the support set is in the checkpoint',
    );
    const queueOnly = (t: Record<string, Float32Array>) => Object.fromEntries(Object.entries(t).filter(([n]) => n.includes('queue.')));
    const queueWorst = worstRelative(queueOnly(ddp), queueOnly(single));
    const worst = worstRelative(ddp, single);
    console.log(`      all4one, 2 ranks vs 1 process: worst relative difference ${worst} (support set: ${queueWorst})`);
    assert.ok(queueWorst < 1e-5, `support set: worst relative difference ${queueWorst}`);
    assert.ok(worst < 1e-5, `worst relative difference ${worst}`);
  });

  it('negative control: a per-rank support set (rows not gathered) fails verify', () => {
    const script = join(process.cwd(), 'dist', 'tests', 'distributed', 'workers', 'all4one-local-queue-cli.js');
    const out = spawnSync(process.execPath, [script, 'verify', ...ARGS, '--method', 'all4one_local_queue', '--devices', '2', '--steps', '3'], {
      encoding: 'utf8',
      timeout: 240_000,
    });
    assert.equal(out.status, 1, out.stdout + out.stderr);
    assert.match(out.stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
  });
});

/**
 * The run-directory lock with `--devices 2` (slow tier: two workers start): rank 0, a worker
 * and not the launcher, holds it while the run trains, and it is gone after the run.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { processAlive, readRunLock, runLockPath } from '../../src/trainer/run-lock.js';
import { CLI, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('ssl-train --devices 2 and the run-directory lock', function () {
  this.timeout(180_000);
  const root = tempDir('ssl-zoo-run-lock-');

  it('with --devices 2, rank 0 (a worker, not the launcher) holds the lock, and releases it at the end', async () => {
    const ranks = join(root, 'two-ranks');
    const launcher = spawn(
      process.execPath,
      [CLI, ...SMOKE_FLAGS, '--max-steps', '40', '--val-every', '0', '--log-every', '1', '--devices', '2', '--run-dir', ranks],
      {
        stdio: 'ignore',
      },
    );
    const exited = new Promise<number | null>((resolve) => launcher.once('exit', resolve));
    try {
      const started = Date.now();
      while (readRunLock(ranks) === undefined) {
        assert.ok(Date.now() - started < 120_000 && launcher.exitCode === null, 'rank 0 takes the lock');
        await sleep(20);
      }
      const holder = readRunLock(ranks)?.pid as number;
      assert.notEqual(holder, launcher.pid);
      assert.ok(processAlive(holder));
      assert.equal(await exited, 0);
      assert.equal(existsSync(runLockPath(ranks)), false);
      assert.equal(processAlive(holder), false, 'the lock named rank 0, a worker that has exited with the launcher');
    } finally {
      launcher.kill('SIGKILL');
    }
  });
});

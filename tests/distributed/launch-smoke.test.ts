import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, runCli, tempDir } from '../helpers/run.js';
import { SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';

/**
 * Fast-tier smoke tests of multi-process runs through the real launcher and Gloo: a 2-rank
 * run trains end to end, and a dead rank ends the job with a clear error, never a hang. The
 * exactness of W-rank training is checked in the full tier (training.full.test.ts,
 * zoo-exactness.full.test.ts).
 */
describe('multi-process runs: launch, train, fail cleanly', function () {
  this.timeout(300_000);

  it('ssl-train --method simclr --devices 2 trains end to end; only rank 0 writes the run directory', () => {
    const runDir = join(tempDir(), 'run');
    const { status, stdout, stderr } = runCli(
      [
        '--method',
        'simclr',
        '--devices',
        '2',
        ...SMALL_RUN.filter((a, i, all) => a !== '--val-every' && all[i - 1] !== '--val-every'),
        ...SMALL_PROJECTOR,
        '--batch-size',
        '32',
        '--epochs',
        '2',
        '--run-dir',
        runDir,
      ],
      180_000,
    );
    assert.equal(status, 0, stderr);
    const summary = JSON.parse(stdout.trim().split('\n').pop() as string) as Record<string, number>;
    assert.ok(summary['val/knn_acc1'] > 0);
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(config.worldSize, 2);
    assert.equal(config.localBatch, 16);
    const steps = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { step: number });
    assert.equal(new Set(steps.map((s) => `${s.step}-${Object.keys(s).join()}`)).size, steps.length, 'each row logged once (rank 0 only)');
    assert.ok(existsSync(join(runDir, 'checkpoints', 'last.ckpt')));
  });

  it('a killed rank makes the other exit with a clear error within the timeout, never a hang', async () => {
    const store = tempDir('ssl-zoo-store-');
    const runDir = join(tempDir(), 'run');
    const args = [CLI, ...SMALL_RUN, ...SMALL_PROJECTOR, '--batch-size', '24', '--epochs', '50', '--timeout', '3', '--run-dir', runDir];
    const env = (rank: number) => ({
      ...process.env,
      RANK: String(rank),
      WORLD_SIZE: '2',
      LOCAL_RANK: String(rank),
      LOCAL_WORLD_SIZE: '2',
      SSL_ZOO_RENDEZVOUS: `file://${store}`,
    });
    const survivor = spawn(process.execPath, args, { env: env(0), stdio: ['ignore', 'pipe', 'pipe'] });
    const victim = spawn(process.execPath, args, { env: env(1), stdio: ['ignore', 'ignore', 'ignore'] });
    let stderr = '';
    survivor.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    let stdout = '';
    survivor.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    // Wait until training runs (rank 0 prints its first step), then kill rank 1.
    const started = Date.now();
    while (!/step 1\//.test(stdout) && Date.now() - started < 60_000) await new Promise((r) => setTimeout(r, 100));
    assert.match(stdout, /step 1\//, 'training started');
    victim.kill('SIGKILL');
    const killedAt = Date.now();
    const code = await new Promise<number | null>((resolve) => {
      const guard = setTimeout(() => {
        survivor.kill('SIGKILL');
        resolve(null);
      }, 30_000);
      survivor.on('exit', (c) => {
        clearTimeout(guard);
        resolve(c);
      });
    });
    assert.notEqual(code, null, 'rank 0 hung');
    assert.notEqual(code, 0);
    assert.ok(Date.now() - killedAt < 15_000, `rank 0 took ${Date.now() - killedAt} ms to fail`);
    assert.match(stderr, /gloo: .* failed on rank 0 of 2/);
  });

  it('the launcher stops the other ranks and exits non-zero when a rank dies', async () => {
    const runDir = join(tempDir(), 'run');
    const launcher = spawn(
      process.execPath,
      [CLI, ...SMALL_RUN, ...SMALL_PROJECTOR, '--devices', '2', '--batch-size', '24', '--epochs', '50', '--timeout', '3', '--run-dir', runDir],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    launcher.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    launcher.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const started = Date.now();
    while (!/step 1\//.test(stdout) && Date.now() - started < 60_000) await new Promise((r) => setTimeout(r, 100));
    const children = spawnSync('pgrep', ['-P', String(launcher.pid)], { encoding: 'utf8' })
      .stdout.trim()
      .split('\n')
      .map(Number);
    assert.equal(children.length, 2, 'two workers');
    process.kill(children[1], 'SIGKILL');
    const code = await new Promise<number | null>((resolve) => {
      const guard = setTimeout(() => {
        launcher.kill('SIGKILL');
        resolve(null);
      }, 30_000);
      launcher.on('exit', (c) => {
        clearTimeout(guard);
        resolve(c);
      });
    });
    assert.notEqual(code, null, 'launcher hung');
    assert.equal(code, 1);
    assert.match(stderr, /^ssl-train: rank 1 failed: killed by SIGKILL, not by ssl-train \(most often the kernel's out-of-memory killer: `dmesg` names it\)$/m);
    const alive = spawnSync('pgrep', ['-P', String(launcher.pid)], { encoding: 'utf8' }).stdout.trim();
    assert.equal(alive, '', 'no worker left running');
  });
});

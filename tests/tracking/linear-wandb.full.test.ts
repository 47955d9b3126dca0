import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { readWandbRunInfo } from '../../src/tracking/identity.js';
import { CLI, tempDir } from '../helpers/run.js';

import { localHistory, TINY_FLAGS, useFakeWandb } from './helpers.js';

function cli(args: string[], env: NodeJS.ProcessEnv): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...env, FORCE_COLOR: '0' }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 240_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stderr });
    });
  });
}

describe('ssl-train linear --wandb-project', function () {
  this.timeout(600_000);
  const wandb = useFakeWandb();

  it('streams every epoch of the linear evaluation to W&B, as the run directory records it', async () => {
    const source = join(tempDir(), 'source');
    const trained = await cli([...TINY_FLAGS, '--run-dir', source], wandb.env);
    assert.equal(trained.status, 0, trained.stderr);
    const runDir = join(tempDir(), 'linear');
    const linear = await cli(['linear', source, '--epochs', '2', '--batch-size', '32', '--run-dir', runDir, '--wandb-project', 'eval-project'], wandb.env);
    assert.equal(linear.status, 0, linear.stderr);
    const info = readWandbRunInfo(runDir);
    assert.equal(info?.state, 'synced');
    const run = wandb.server.run(info.id);
    assert.equal(run.project, 'eval-project');
    assert.ok(run.tags?.includes('linear'), `tags ${String(run.tags)}`);
    // Every row of the run directory (training steps and the 2 epochs' validation) reached W&B.
    const rows = localHistory(runDir);
    assert.equal(rows.filter((row) => row.values['val/acc1'] !== undefined).length, 2);
    assert.equal(run.history.length, rows.length);
    rows.forEach((row, i) => {
      assert.equal(run.history[i]._step, row.step);
      for (const [k, v] of Object.entries(row.values)) assert.equal(run.history[i][k], v, `step ${row.step} ${k}`);
    });
    assert.equal(run.exitcode, 0);
  });
});

/**
 * The launcher and stop signals (issue #31): it forwards SIGUSR1 (as SIGINT and SIGTERM) to
 * its workers (as a stop message to those that listen for one), waits for them at most its
 * stop timeout before killing them, and exits with the signal's conventional code (128 + its
 * number), not 1.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { freshDir, workerPath } from './helpers.js';

/** Runs the stop driver in `mode`, sends `signal` to the launcher once both workers are ready; how it ended and how long after the signal. */
async function stopDriver(
  mode: 'graceful' | 'stubborn' | 'listening',
  signal: NodeJS.Signals,
): Promise<{ code: number | null; stderr: string; afterSignalMs: number }> {
  const dir = freshDir('stop');
  const child = spawn(process.execPath, [workerPath('stop-driver'), mode, dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const guard = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const started = Date.now();
  while (!(existsSync(join(dir, 'ready-0')) && existsSync(join(dir, 'ready-1'))) && Date.now() - started < 20_000) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const sent = Date.now();
  child.kill(signal);
  const code = await exited;
  clearTimeout(guard);
  return { code, stderr, afterSignalMs: Date.now() - sent };
}

describe('launcher: stop signals', function () {
  this.timeout(60_000);

  it('forwards SIGUSR1 to the workers and exits 138 when they stop, with no failure report', async () => {
    const r = await stopDriver('graceful', 'SIGUSR1');
    assert.equal(r.code, 138, r.stderr);
    assert.equal(r.stderr, '');
    assert.ok(r.afterSignalMs < 1500, `took ${r.afterSignalMs} ms: it did not wait for the stop timeout`);
  });

  it('forwards the first signal as a stop message to workers that listen for it (not as the signal, which a terminal may already have sent them)', async () => {
    const r = await stopDriver('listening', 'SIGTERM');
    assert.equal(r.code, 143, r.stderr);
    assert.ok(r.afterSignalMs < 1500, `took ${r.afterSignalMs} ms: the workers got the message, not only the (ignored) signal`);
  });

  it('kills workers still running after the stop timeout, and exits 143 after a SIGTERM', async () => {
    const r = await stopDriver('stubborn', 'SIGTERM');
    assert.equal(r.code, 143, r.stderr);
    assert.ok(r.afterSignalMs >= 1400 && r.afterSignalMs < 10_000, `took ${r.afterSignalMs} ms (stop timeout 1.5 s)`);
  });
});

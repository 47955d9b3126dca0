/**
 * `ssl-train` into a run directory another run is using (issue #31), with real processes:
 * a second run (fresh, `--resume auto`, `--devices 2`) into the directory of a running
 * run is refused with one line, exit 2, and changes no file; the lock of a run killed with
 * SIGKILL is taken over with a warning; a lock from another host is respected unless
 * `--force-unlock`; readers (`compare`, `export`, `linear`) work on a locked run whose last
 * `metrics.jsonl` line is being written; `linear` and `wandb-sync` refuse to write into it.
 */
import { strict as assert } from 'node:assert';
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { processAlive, readRunLock, runLockPath } from '../../src/trainer/run-lock.js';
import { checksums, writeLock } from '../helpers/run-lock.js';
import { metricsRows } from '../helpers/run-files.js';
import { CLI, runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

/** Two steps, every step logged. */
const SHORT = [...SMOKE_FLAGS, '--max-steps', '2', '--val-every', '0', '--log-every', '1'];
/** A run that goes on far longer than the test (it is killed). */
const LONG = [...SMOKE_FLAGS, '--epochs', '1000', '--val-every', '0', '--log-every', '1'];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The one `ssl-train: error:` line a refused run prints, exit code 2. */
function assertRefused(result: { status: number | null; stderr: string }, pattern: RegExp): void {
  assert.equal(result.status, 2, result.stderr);
  const lines = result.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, result.stderr);
  assert.match(lines[0], /^ssl-train: error: /);
  assert.match(lines[0], pattern);
}

describe('ssl-train into a run directory another run is using', function () {
  this.timeout(180_000);
  const root = tempDir('ssl-zoo-run-lock-');
  const dir = join(root, 'run');
  let first: ChildProcess | undefined;

  after(() => first?.kill('SIGKILL'));

  it('refuses a second run (fresh, --resume auto, --devices 2) with one line, exit 2, and no file changed', async () => {
    first = spawn(process.execPath, [CLI, ...LONG, '--run-dir', dir], { stdio: 'ignore' });
    const started = Date.now();
    while (metricsRows(dir).length === 0) {
      assert.ok(Date.now() - started < 120_000, 'the first run logs a row');
      assert.equal(first.exitCode, null, 'the first run is still running');
      await sleep(50);
    }
    first.kill('SIGSTOP'); // alive, but no file of it moves while the second run tries
    try {
      const holder = readRunLock(dir);
      assert.equal(holder?.pid, first.pid, 'the lock names the process that writes the directory');
      assert.equal(holder?.host, hostname());
      const before = checksums(dir);
      assert.ok(before['config.json'] && before['metrics.jsonl'] && before['ssl-train.lock']);
      const inUse = new RegExp(
        `run directory ${dir} is in use by pid ${first.pid} on host ${hostname()} since \\d\\d:\\d\\d:\\d\\d \\(ssl-train --dataset synthetic .*\\); wait for it, or pass --force-unlock if that run is gone$`,
      );
      for (const extra of [[], ['--resume', 'auto']]) {
        assertRefused(runCli([...SHORT, '--run-dir', dir, ...extra], 60_000), inUse);
        assert.deepEqual(checksums(dir), before, `after a second run with ${JSON.stringify(extra)}`);
      }
      const rendezvous = join(root, 'rendezvous');
      const t0 = Date.now();
      assertRefused(runCli([...SHORT, '--run-dir', dir, '--devices', '2', '--rendezvous', `file://${rendezvous}`], 60_000), inUse);
      assert.equal(existsSync(rendezvous), false, 'no worker was started (none reached the rendezvous)');
      assert.ok(Date.now() - t0 < 30_000);
      assert.deepEqual(checksums(dir), before, 'after --devices 2');
    } finally {
      first.kill('SIGCONT');
    }
  });

  it('takes over the lock of a run killed with SIGKILL (stale) with a warning, and releases it at the end', async () => {
    assert.ok(first);
    const killedPid = first.pid;
    const exited = new Promise((resolve) => first?.once('exit', resolve));
    first.kill('SIGKILL');
    await exited;
    assert.equal(readRunLock(dir)?.pid, killedPid, 'SIGKILL leaves the lock behind');
    const { status, stderr } = runCli([...SHORT, '--run-dir', dir], 60_000);
    assert.equal(status, 0, stderr);
    assert.match(
      stderr,
      new RegExp(`^ssl-train: warning: run directory ${dir}: taking over the lock of pid ${killedPid} on host .*, which is no longer running$`, 'm'),
    );
    assert.equal(existsSync(runLockPath(dir)), false, 'released at the end of the run');
    assert.deepEqual(
      metricsRows(dir).map((r) => r.step),
      [1, 2],
    );
  });

  it('respects a lock from another host; --force-unlock takes it over', () => {
    writeLock(dir, process.pid, 'other-host.invalid');
    const before = checksums(dir);
    assertRefused(
      runCli([...SHORT, '--run-dir', dir, '--resume', 'auto'], 60_000),
      /in use by pid \d+ on host other-host\.invalid .*\(another host: .*\); wait for it, or pass --force-unlock/,
    );
    assert.deepEqual(checksums(dir), before);
    const { status, stderr } = runCli([...SHORT, '--run-dir', dir, '--force-unlock'], 60_000);
    assert.equal(status, 0, stderr);
    assert.match(stderr, /^ssl-train: warning: --force-unlock: taking over the lock of run directory .* from pid \d+ on host other-host\.invalid/m);
    assert.equal(existsSync(runLockPath(dir)), false);
  });

  it('names the training process, not a wrapper: with only the wrapper killed (as npx), the run still holds it', async () => {
    const wrapped = join(root, 'wrapped');
    // A wrapper like npx: a parent process that starts the CLI and waits.
    const script = `require('node:child_process').spawn(process.execPath, ${JSON.stringify([CLI, ...LONG, '--run-dir', wrapped])}, { stdio: 'ignore' }); setInterval(() => {}, 1000);`;
    const wrapper = spawn(process.execPath, ['-e', script], { stdio: 'ignore' });
    let trainer: number | undefined;
    try {
      const started = Date.now();
      while (metricsRows(wrapped).length === 0) {
        assert.ok(Date.now() - started < 120_000, 'the wrapped run logs a row');
        await sleep(50);
      }
      trainer = readRunLock(wrapped)?.pid;
      assert.ok(trainer !== undefined && trainer !== wrapper.pid, 'the lock names the process that trains');
      const exited = new Promise((resolve) => wrapper.once('exit', resolve));
      wrapper.kill('SIGKILL');
      await exited;
      assertRefused(runCli([...SHORT, '--run-dir', wrapped, '--resume', 'auto'], 60_000), new RegExp(`is in use by pid ${trainer} `));
    } finally {
      wrapper.kill('SIGKILL');
      if (trainer !== undefined && processAlive(trainer)) process.kill(trainer, 'SIGKILL');
    }
  });

  it('releases the lock of a run that fails', () => {
    const failing = join(root, 'failing');
    mkdirSync(join(failing, 'checkpoints'), { recursive: true });
    writeFileSync(join(failing, 'checkpoints', 'last.ckpt'), 'not a checkpoint');
    const { status, stderr } = runCli([...SHORT, '--run-dir', failing, '--resume', 'auto'], 60_000);
    assert.equal(status, 2, stderr);
    assert.match(stderr, /^ssl-train: error: resume: no valid checkpoint in .* \(1 found, none usable\)/m); // raised inside the trainer, with the lock held
    assert.equal(existsSync(runLockPath(failing)), false);
  });

  describe('readers of a locked run whose last metrics line is being written', () => {
    const dir = join(root, 'read-while-running');
    let holder: ChildProcess | undefined;
    let unchanged: Record<string, string>;

    before(() => {
      const run = runCli([...SHORT, '--run-dir', dir], 60_000);
      assert.equal(run.status, 0, run.stderr);
      holder = spawn('sleep', ['120'], { stdio: 'ignore' });
      writeLock(dir, holder.pid as number);
      appendFileSync(join(dir, 'metrics.jsonl'), '{"step": 3, "time": 17'); // a row being appended
      unchanged = checksums(dir);
    });
    afterEach(() => assert.deepEqual(checksums(dir), unchanged, 'nothing in the run directory changed'));
    after(() => holder?.kill());

    it('compare and export read it', () => {
      const out = join(root, 'report');
      const compare = runCli(['compare', dir, '--out', out, '--no-embeddings'], 60_000);
      assert.equal(compare.status, 0, compare.stderr);
      assert.ok(existsSync(join(out, 'report.html')));
      const exported = runCli(['export', dir, '--format', 'tfjs', '--out', join(root, 'export')], 60_000);
      assert.equal(exported.status, 0, exported.stderr);
      assert.match(exported.stdout, /"files":\["model\.json"/);
    });

    it('linear reads it into its own run directory, and refuses to write into it', () => {
      const linearDir = join(root, 'linear');
      const linear = runCli(['linear', dir, '--epochs', '1', '--batch-size', '32', '--run-dir', linearDir], 60_000);
      assert.equal(linear.status, 0, linear.stderr);
      assert.equal(existsSync(runLockPath(linearDir)), false, "linear's own run directory is locked while it runs, then released");
      // Linear evaluation locks the run directory it writes: pointed at the running run's, it is refused.
      assertRefused(
        runCli(['linear', dir, '--epochs', '1', '--batch-size', '32', '--run-dir', dir, '--resume', 'auto'], 60_000),
        new RegExp(`is in use by pid ${holder?.pid} .*; wait for it, or delete ${runLockPath(dir)} if that run is gone$`),
      );
    });

    it('wandb-sync, which writes wandb.json as the running run does, waits for the run to end', () => {
      assertRefused(
        runCli(['wandb-sync', dir], 60_000, { WANDB_API_KEY: 'x'.repeat(40), WANDB_BASE_URL: 'http://127.0.0.1:9' }),
        new RegExp(`^ssl-train: error: wandb-sync: run directory ${dir} is in use by pid ${holder?.pid} `),
      );
    });
  });
});

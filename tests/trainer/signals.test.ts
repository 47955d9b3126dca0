/**
 * A graceful stop on SIGTERM, SIGINT and SIGUSR1 (issue #31), through real `ssl-train`
 * processes: the run finishes its step, writes last.ckpt there and summary.json "interrupted",
 * says so in one line and exits with 128 + the signal's number; a second signal ends it at
 * once; a signal before training ends it at once too; `--requeue` under Slurm runs
 * `scontrol requeue`. The resumption of such runs, bit for bit, and 2 ranks are in
 * signals.full.test.ts.
 */
import { strict as assert } from 'node:assert';
import { chmodSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { signalExitCode, STOP_MESSAGE, StopSignal, type SignalTarget, type StopSignalName } from '../../src/trainer/stop-signal.js';
import { checkpointProgress, metricsRows } from '../helpers/run-files.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';
import { readSummary, signalWhenLogged, startCli, trainSteps, type Ended } from '../helpers/signals.js';

/** Synthetic 16x16 images, mlp backbone, batch 32 of 256: 8 steps per epoch, every step logged, no validation. */
const FLAGS = [...SMOKE_FLAGS, '--log-every', '1', '--val-every', '0'];

/** A logged step `k` after which the stop (at step k + 1 or k + 2) is mid-epoch (8 steps per epoch). */
const midEpoch = (k: number) => k % 8 >= 1 && k % 8 <= 5;

/**
 * A fake process for {@link StopSignal}: listeners by signal and for messages, and what a
 * signal does: a listener's call, else (the default action) the end of the process.
 */
class FakeProcess implements SignalTarget {
  readonly listeners = new Map<StopSignalName, () => void>();
  messageListener: ((message: unknown) => void) | undefined;
  /** How the process ended: by kill() (a re-raised signal) or a signal without a listener. */
  readonly ended: string[] = [];
  on(signal: StopSignalName, listener: () => void): void {
    this.listeners.set(signal, listener);
  }
  off(signal: StopSignalName): void {
    this.listeners.delete(signal);
  }
  onMessage(listener: (message: unknown) => void): void {
    this.messageListener = listener;
  }
  offMessage(): void {
    this.messageListener = undefined;
  }
  kill(signal: StopSignalName): void {
    this.ended.push(`kill ${signal}`);
  }
  signal(signal: StopSignalName): void {
    const listener = this.listeners.get(signal);
    if (listener) listener();
    else this.ended.push(`default ${signal}`);
  }
  message(signal: StopSignalName): void {
    this.messageListener?.({ type: STOP_MESSAGE, signal });
  }
}

/** Whether process `pid` catches `signal` (its bit in /proc/<pid>/status's SigCgt). */
function handlesSignal(pid: number, signal: StopSignalName): boolean {
  const mask = /SigCgt:\s*([0-9a-f]+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? '0';
  return ((BigInt(`0x${mask}`) >> BigInt(signalExitCode(signal) - 129)) & 1n) === 1n;
}

/** Asserts the graceful stop of a run: exit code, the one line, summary.json, last.ckpt and the history all at one step. */
function assertInterrupted(r: Ended, runDir: string, signal: StopSignalName, atLeast: number): number {
  const last = join(runDir, 'checkpoints', 'last.ckpt');
  assert.equal(r.signal, null, `exited, not killed by a signal\n${r.stderr}`);
  assert.equal(r.code, signalExitCode(signal), r.stderr);
  const summary = readSummary(runDir);
  assert.ok(summary, 'summary.json is written');
  assert.equal(summary.status, 'interrupted');
  assert.equal(summary.signal, signal);
  const step = summary.step as number;
  assert.ok(step >= atLeast && step <= atLeast + 1, `stopped at step ${step}, right after the signal at step ${atLeast - 1}`);
  const epoch = Math.floor((step - 1) / 8) + 1;
  assert.equal(r.stderr, `ssl-train: interrupted by ${signal} at step ${step} (epoch ${epoch}); ${last} saved; resume with --resume auto\n`);
  assert.doesNotMatch(r.stdout, /"runDir"/, 'no result line');
  const progress = checkpointProgress(last);
  assert.equal(progress?.step, step, 'last.ckpt is at the step it stopped at');
  assert.equal(progress?.batchInEpoch, step % 8, 'mid-epoch');
  assert.deepEqual(
    trainSteps(runDir),
    Array.from({ length: step }, (_, i) => i + 1),
    'every step up to the stop is logged, none after it',
  );
  assert.ok(
    readdirSync(join(runDir, 'checkpoints')).every((n) => n.endsWith('.ckpt')),
    'no temporary file left',
  );
  assert.ok(!existsSync(join(runDir, 'ssl-train.lock')), "the run directory's lock is released");
  return step;
}

describe('graceful stop on a signal', function () {
  this.timeout(120_000);

  describe('StopSignal', () => {
    it("before arm(), a signal (or the launcher's message) ends the process at once by its default action", () => {
      const fake = new FakeProcess();
      new StopSignal(fake).install();
      assert.deepEqual([...fake.listeners.keys()].sort(), ['SIGINT', 'SIGTERM', 'SIGUSR1']);
      fake.signal('SIGUSR1');
      assert.deepEqual(fake.ended, ['kill SIGUSR1']);
      assert.equal(fake.listeners.size, 0, 'the listeners are removed first, so the default action applies');
      const other = new FakeProcess();
      new StopSignal(other).install();
      other.message('SIGTERM');
      assert.deepEqual(other.ended, ['kill SIGTERM']);
    });

    it("armed: the first signal asks for a stop and removes the listeners, so a second signal has its default action; the launcher's copy is the same request", () => {
      const fake = new FakeProcess();
      const stop = new StopSignal(fake).install();
      stop.arm();
      assert.equal(stop.requested, undefined);
      fake.signal('SIGINT'); // Ctrl-C from the terminal
      assert.equal(stop.requested, 'SIGINT');
      fake.message('SIGINT'); // the same Ctrl-C, forwarded by the launcher
      assert.deepEqual(fake.ended, []);
      assert.equal(stop.requested, 'SIGINT');
      fake.signal('SIGINT');
      assert.deepEqual(fake.ended, ['default SIGINT'], 'a second Ctrl-C ends the process');

      const viaLauncher = new FakeProcess();
      const second = new StopSignal(viaLauncher).install();
      second.arm();
      viaLauncher.message('SIGUSR1');
      assert.equal(second.requested, 'SIGUSR1');
      viaLauncher.signal('SIGTERM');
      assert.deepEqual(viaLauncher.ended, ['default SIGTERM']);
    });

    it('uninstall() removes the listeners; the exit codes are 128 + the signal number', () => {
      const fake = new FakeProcess();
      new StopSignal(fake).install().uninstall();
      assert.equal(fake.listeners.size, 0);
      assert.equal(fake.messageListener, undefined);
      assert.deepEqual([signalExitCode('SIGINT'), signalExitCode('SIGTERM'), signalExitCode('SIGUSR1')], [130, 143, 138]);
    });
  });

  it('SIGTERM mid-epoch (1 rank): the step finishes, last.ckpt and summary.json "interrupted" at it, one line, exit 143', async () => {
    const runDir = join(tempDir(), 'run');
    const run = startCli([...FLAGS, '--epochs', '20', '--run-dir', runDir]);
    const k = await signalWhenLogged(run, runDir, midEpoch, ['SIGTERM']);
    assert.ok(k !== undefined, 'the signal was sent during training');
    assertInterrupted(await run.ended, runDir, 'SIGTERM', k + 1);
  });

  it('SIGINT (Ctrl-C) mid-epoch: exit 130, summary "interrupted" with SIGINT', async () => {
    const runDir = join(tempDir(), 'run');
    const run = startCli([...FLAGS, '--epochs', '20', '--run-dir', runDir]);
    const k = await signalWhenLogged(run, runDir, midEpoch, ['SIGINT']);
    assert.ok(k !== undefined, 'the signal was sent during training');
    assertInterrupted(await run.ended, runDir, 'SIGINT', k + 1);
  });

  it("a signal at an epoch's last step: the epoch end runs first (validation, epoch-1.ckpt), then the stop at that step", async () => {
    const runDir = join(tempDir(), 'run');
    const run = startCli([...FLAGS, '--val-every', '1', '--knn-train-samples', '64', '--val-samples', '64', '--epochs', '20', '--run-dir', runDir]);
    // Step 7 logged, step 8 (the epoch's last) not yet: the stop is agreed at step 8 or at the epoch end after it.
    const k = await signalWhenLogged(run, runDir, (step) => step === 7, ['SIGTERM']);
    assert.equal(k, 7, 'the signal was sent at step 7');
    const r = await run.ended;
    assert.equal(r.code, 143, r.stderr);
    const last = join(runDir, 'checkpoints', 'last.ckpt');
    assert.equal(r.stderr, `ssl-train: interrupted by SIGTERM at step 8 (epoch 1); ${last} saved; resume with --resume auto\n`);
    assert.deepEqual(checkpointProgress(last), { epoch: 1, step: 8, batchInEpoch: 0 });
    assert.deepEqual(readdirSync(join(runDir, 'checkpoints')).sort(), ['epoch-1.ckpt', 'last.ckpt']);
    assert.deepEqual(
      metricsRows(runDir)
        .filter((row) => row['val/knn_acc1'] !== undefined)
        .map((row) => row.step),
      [8],
      "the epoch's validation ran",
    );
    assert.equal(readSummary(runDir)?.step, 8);
  });

  it('a second signal ends the process at once, in the middle of the stop: killed by it, no summary, no interrupted line', async () => {
    const runDir = join(tempDir(), 'run');
    // A 4096-wide projector (18 M parameters): the checkpoint write after the first signal takes long enough to send a second one.
    const wide = ['--method-arg', 'projHiddenDim=4096', '--method-arg', 'projOutputDim=4096'];
    const run = startCli([...FLAGS, ...wide, '--epochs', '20', '--run-dir', runDir]);
    const k = await signalWhenLogged(run, runDir, (step) => step >= 1, ['SIGTERM']);
    assert.ok(k !== undefined, 'the signal was sent during training');
    // The first signal is handled when its handlers are gone (the kernel's default action again).
    const started = Date.now();
    while (!run.done && handlesSignal(run.child.pid!, 'SIGTERM') && Date.now() - started < 60_000) await new Promise((resolve) => setImmediate(resolve));
    run.child.kill('SIGINT');
    const r = await run.ended;
    assert.equal(r.code, null, r.stderr);
    assert.equal(r.signal, 'SIGINT');
    assert.equal(readSummary(runDir), undefined, 'no summary.json');
    assert.doesNotMatch(r.stderr, /interrupted/);
  });

  it('a signal before training starts (a rank waiting for its peer) ends the process at once, with nothing written', async () => {
    const runDir = join(tempDir(), 'run');
    const store = tempDir('ssl-zoo-store-');
    // Rank 0 of 2 alone: it waits at the rendezvous (until --timeout) for a rank 1 that never comes.
    const env = { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '0', LOCAL_WORLD_SIZE: '2', SSL_ZOO_RENDEZVOUS: `file://${store}` };
    const run = startCli([...FLAGS, '--epochs', '1', '--timeout', '60', '--run-dir', runDir], { env });
    const started = Date.now();
    while (!run.done && readdirSync(store).length === 0 && Date.now() - started < 60_000) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(!run.done && readdirSync(store).length > 0, 'rank 0 reached the rendezvous');
    // SIGUSR1: without the handlers Node would start its inspector on it, and go on waiting.
    const sent = Date.now();
    run.child.kill('SIGUSR1');
    const r = await run.ended;
    assert.ok(Date.now() - sent < 5000, `took ${Date.now() - sent} ms`);
    assert.equal(r.signal, 'SIGUSR1', `killed by SIGUSR1 (shell exit code 138)\n${r.stderr}`);
    assert.ok(!existsSync(runDir), 'nothing written');
  });

  it('SIGUSR1 while the program is still loading ends the process (Node would start its inspector on it)', async () => {
    const runDir = join(tempDir(), 'run');
    const store = tempDir('ssl-zoo-store-');
    // Rank 0 of 2 alone never starts training, whenever the signal comes.
    const env = { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '0', LOCAL_WORLD_SIZE: '2', SSL_ZOO_RENDEZVOUS: `file://${store}` };
    const run = startCli([...FLAGS, '--epochs', '1', '--timeout', '10', '--run-dir', runDir], { env });
    // Past Node's start (~50 ms), while the program's modules load (~1 s, before its stop
    // handlers exist): without bin.ts's handler Node starts its inspector and the rank waits.
    await new Promise((resolve) => setTimeout(resolve, 400));
    run.child.kill('SIGUSR1');
    const r = await run.ended;
    assert.equal(r.signal, 'SIGUSR1', `killed by SIGUSR1\n${r.stderr}`);
    assert.doesNotMatch(r.stderr, /Debugger listening/);
  });

  describe('--requeue', () => {
    /** A fake `scontrol` first on PATH: it records its arguments in `calls` and exits with `code`. */
    function fakeScontrol(code: number): { path: string; calls: string } {
      const bin = tempDir('ssl-zoo-bin-');
      const calls = join(bin, 'calls');
      writeFileSync(
        join(bin, 'scontrol'),
        `#!/bin/sh\necho "$@" >> '${calls}'\n${code === 0 ? '' : 'echo "slurm_requeue error: Job is not requeueable" >&2\n'}exit ${code}\n`,
      );
      chmodSync(join(bin, 'scontrol'), 0o755);
      return { path: `${bin}:${process.env.PATH}`, calls };
    }

    for (const [what, code] of [
      ['runs scontrol requeue $SLURM_JOB_ID after the checkpoint, and exits with the signal code', 0],
      ['reports a failed scontrol in one line, and still exits with the signal code', 1],
    ] as const) {
      it(`under Slurm (SLURM_JOB_ID), SIGUSR1: ${what}`, async () => {
        const runDir = join(tempDir(), 'run');
        const scontrol = fakeScontrol(code);
        const run = startCli([...FLAGS, '--epochs', '20', '--requeue', '--run-dir', runDir], { env: { PATH: scontrol.path, SLURM_JOB_ID: '4242' } });
        const k = await signalWhenLogged(run, runDir, midEpoch, ['SIGUSR1']);
        assert.ok(k !== undefined, 'the signal was sent during training');
        const r = await run.ended;
        const lines = r.stderr.trim().split('\n');
        assert.equal(lines.length, 2, r.stderr);
        assertInterrupted({ ...r, stderr: `${lines[0]}\n` }, runDir, 'SIGUSR1', k + 1);
        assert.equal(readFileSync(scontrol.calls, 'utf8'), 'requeue 4242\n');
        assert.equal(
          lines[1],
          code === 0
            ? 'ssl-train: Slurm job 4242 requeued; it resumes with --resume auto'
            : 'ssl-train: error: --requeue: scontrol requeue 4242 failed: exit code 1: slurm_requeue error: Job is not requeueable',
        );
      });
    }

    it('without SLURM_JOB_ID: one warning line, and the run goes on', () => {
      const runDir = join(tempDir(), 'run');
      const r = runCli([...FLAGS, '--epochs', '1', '--max-steps', '1', '--requeue', '--run-dir', runDir], 60_000, { SLURM_JOB_ID: '' });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stderr, 'ssl-train: warning: --requeue: SLURM_JOB_ID is not set (not a Slurm job); a signal will stop the run without requeueing it\n');
    });
  });
});

/**
 * A run stopped by a signal resumes bit for bit (issue #31), through real `ssl-train`
 * processes: SIGTERM mid-epoch on 1 rank and on 2 ranks (`--devices 2`), for a queue method
 * (nnclr) and for dino, then `--resume auto` gives the uninterrupted run's per-step losses and
 * validation exactly; Ctrl-C in a terminal (SIGINT to the launcher and its ranks at once, and
 * forwarded by the launcher, also after the ranks acted on it) is one stop, exit 130.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { signalExitCode, type StopSignalName } from '../../src/trainer/stop-signal.js';
import { readFileSync } from 'node:fs';
import { checkpointProgress, comparableRow, metricsRows } from '../helpers/run-files.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';
import { readSummary, signalWhenLogged, startCli, trainSteps } from '../helpers/signals.js';

/** Synthetic 16x16 images, mlp backbone, batch 32 of 256: 8 steps per epoch, 3 epochs, every step logged and validated each epoch. */
const FLAGS = [...SMOKE_FLAGS, '--knn-train-samples', '128', '--val-samples', '64', '--log-every', '1', '--epochs', '3', '--timeout', '60'];

/** Method flags: nnclr with a small support queue (it fills within the first epoch), dino with small heads. */
const METHODS: Record<string, string[]> = {
  nnclr: ['--method', 'nnclr', '--method-arg', 'queueSize=64', '--method-arg', 'predHiddenDim=32'],
  dino: ['--method', 'dino', '--method-arg', 'numPrototypes=64'],
};

/** Whether process `pid` catches `signal` (SigCgt in /proc/<pid>/status); false once it has exited. */
function catchesSignal(pid: number, signal: StopSignalName): boolean {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return false;
  }
  const mask = /SigCgt:\s*([0-9a-f]+)/.exec(status)?.[1] ?? '0';
  return ((BigInt(`0x${mask}`) >> BigInt(signalExitCode(signal) - 129)) & 1n) === 1n;
}

/** A logged step `k` in epoch 2 after which the stop (at k + 1 or k + 2) is mid-epoch too. */
const inEpoch2 = (k: number) => k >= 9 && k <= 13;

/**
 * Runs `args` to the end (the reference), then again with `signal` sent to the process group
 * (launcher and ranks) at a step of epoch 2; checks the stop and resumes with --resume auto;
 * the resumed history must equal the reference's.
 */
async function interruptAndResume(args: string[], signal: StopSignalName): Promise<void> {
  const reference = join(tempDir(), 'reference');
  const straight = runCli([...args, '--run-dir', reference], 240_000);
  assert.equal(straight.status, 0, straight.stderr);

  const runDir = join(tempDir(), 'run');
  const run = startCli([...args, '--run-dir', runDir], { group: true, timeoutMs: 240_000 });
  const k = await signalWhenLogged(run, runDir, inEpoch2, [signal], 200_000);
  assert.ok(k !== undefined, 'the signal was sent during epoch 2');
  const r = await run.ended;
  assert.equal(r.code, signalExitCode(signal), r.stderr);
  const summary = readSummary(runDir);
  assert.equal(summary?.status, 'interrupted');
  assert.equal(summary?.signal, signal);
  const step = summary?.step as number;
  assert.ok(step === k + 1 || step === k + 2, `stopped at step ${step} after the signal at step ${k}`);
  const last = join(runDir, 'checkpoints', 'last.ckpt');
  assert.deepEqual(checkpointProgress(last), { epoch: 1, step, batchInEpoch: step - 8 });
  const lines = r.stderr.split('\n').filter((l) => l.startsWith('ssl-train: interrupted'));
  assert.deepEqual(lines, [`ssl-train: interrupted by ${signal} at step ${step} (epoch 2); ${last} saved; resume with --resume auto`], r.stderr);
  assert.deepEqual(
    trainSteps(runDir),
    Array.from({ length: step }, (_, i) => i + 1),
  );

  const resumed = runCli([...args, '--run-dir', runDir, '--resume', 'auto'], 240_000);
  assert.equal(resumed.status, 0, resumed.stderr);
  assert.ok(resumed.stderr.includes(`ssl-train: resuming from ${last} (epoch 2, batch ${step - 8}, step ${step})\n`), resumed.stderr);
  // Every step once, with the uninterrupted run's losses and validation, bit for bit.
  assert.deepEqual(trainSteps(runDir), trainSteps(reference));
  assert.deepEqual(metricsRows(runDir).map(comparableRow), metricsRows(reference).map(comparableRow));
  assert.equal(readSummary(runDir)?.status, 'success');
}

describe('graceful stop on a signal: resuming bit for bit', function () {
  this.timeout(900_000);

  for (const method of Object.keys(METHODS)) {
    it(`${method}, 1 rank: SIGTERM mid-epoch, exit 143, then --resume auto gives the uninterrupted run's history exactly`, async () => {
      await interruptAndResume([...FLAGS, ...METHODS[method]], 'SIGTERM');
    });

    it(`${method}, 2 ranks (--devices 2): SIGTERM to the launcher and ranks, exit 143 from the launcher, then --resume auto exactly`, async () => {
      await interruptAndResume([...FLAGS, ...METHODS[method], '--devices', '2'], 'SIGTERM');
    });
  }

  it('2 ranks: SIGTERM to the launcher alone is forwarded: both ranks stop at one step, the launcher exits 143', async () => {
    const runDir = join(tempDir(), 'run');
    const run = startCli([...FLAGS, '--val-every', '0', '--epochs', '20', '--devices', '2', '--run-dir', runDir], { timeoutMs: 240_000 });
    const k = await signalWhenLogged(run, runDir, (s) => s >= 3, ['SIGTERM'], 200_000);
    assert.ok(k !== undefined, 'the signal was sent during training');
    const r = await run.ended;
    assert.equal(r.code, 143, r.stderr);
    const step = readSummary(runDir)?.step as number;
    assert.equal(readSummary(runDir)?.status, 'interrupted');
    assert.equal(checkpointProgress(join(runDir, 'checkpoints', 'last.ckpt'))?.step, step);
    assert.deepEqual(
      r.stderr.split('\n').filter((l) => l.startsWith('ssl-train:')),
      [
        `ssl-train: interrupted by SIGTERM at step ${step} (epoch ${Math.floor((step - 1) / 8) + 1}); ${join(runDir, 'checkpoints', 'last.ckpt')} saved; resume with --resume auto`,
      ],
      'one line, no rank failure report',
    );
  });

  it("2 ranks: Ctrl-C in a terminal (SIGINT to the launcher and both ranks, then the launcher's forwarded copy) is one stop: exit 130", async () => {
    await interruptAndResume([...FLAGS, ...METHODS.nnclr, '--devices', '2'], 'SIGINT');
  });

  it("2 ranks: the launcher's copy of a signal the ranks already acted on (Ctrl-C reaches them first) does not end them: one graceful stop, exit 130", async () => {
    const runDir = join(tempDir(), 'run');
    // A 4096-wide projector: rank 0's checkpoint write takes long enough for the launcher's copy to arrive during the stop.
    const wide = ['--method-arg', 'projHiddenDim=4096', '--method-arg', 'projOutputDim=4096'];
    const run = startCli([...FLAGS, ...wide, '--val-every', '0', '--epochs', '20', '--devices', '2', '--run-dir', runDir], { timeoutMs: 240_000 });
    const started = Date.now();
    while (!run.done && trainSteps(runDir).length === 0 && Date.now() - started < 200_000) await new Promise((resolve) => setTimeout(resolve, 10));
    const ranks = readFileSync(`/proc/${run.child.pid}/task/${run.child.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
    assert.equal(ranks.length, 2);
    for (const pid of ranks) process.kill(pid, 'SIGINT');
    // Both ranks handled it (their handlers are gone), then the launcher gets its copy.
    while (!run.done && ranks.some((pid) => catchesSignal(pid, 'SIGINT')) && Date.now() - started < 200_000)
      await new Promise((resolve) => setImmediate(resolve));
    run.child.kill('SIGINT');
    const r = await run.ended;
    assert.equal(r.code, 130, r.stderr);
    assert.equal(readSummary(runDir)?.status, 'interrupted', r.stderr);
    assert.equal(readSummary(runDir)?.signal, 'SIGINT');
  });
});

/**
 * No run lost to a crash or a NaN (issue 11), through real `ssl-train` processes: a run
 * killed with SIGKILL mid-epoch resumes bit-exactly with `--resume auto`; a corrupt newest
 * checkpoint is skipped with a warning; a NaN stops the run (one rank or two) without
 * touching the last good checkpoint.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyCheckpoint } from '../../src/trainer/checkpoint.js';
import { CLI, SMOKE_FLAGS, tempDir } from '../helpers/run.js';
import {
  checkpointArrays as tensors,
  checkpointProgress as progressOf,
  comparableRow as comparable,
  killAfterMidEpochCheckpoint,
  metricsRows as metrics,
  type MetricsRow as Row,
} from '../helpers/run-files.js';

/** Preloading this registers the `simclr_nan` test method (see nan-method.ts). */
const NAN_METHOD = fileURLToPath(new URL('./nan-method.js', import.meta.url));

/** Synthetic 16x16 images, mlp backbone, batch 32 of 256 images: 8 steps per epoch. Every step logged. */
const BASE = [...SMOKE_FLAGS, '--knn-train-samples', '128', '--log-every', '1'];

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** `node [--import nan-method] ssl-train args...` to completion. */
function ssl(args: string[], options: { nan?: boolean; timeoutMs?: number } = {}): Run {
  const node = options.nan ? ['--import', NAN_METHOD] : [];
  const r = spawnSync(process.execPath, [...node, CLI, ...args], {
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 120_000,
    env: { ...process.env, FORCE_COLOR: '0' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const trainRows = (rows: Row[]) => rows.filter((r) => r['train/loss'] !== undefined);
const valRows = (rows: Row[]) => rows.filter((r) => r['val/knn_acc1'] !== undefined);

function summary(runDir: string): Record<string, unknown> {
  return JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as Record<string, unknown>;
}

describe('crash safety: resuming after a kill, corrupt checkpoints, NaN', function () {
  this.timeout(180_000);

  it('a run killed with SIGKILL mid-epoch resumes with --resume auto to the same per-step losses and final weights, every step logged once', async () => {
    // 3 epochs of 8 steps, last.ckpt every 3 steps (mid-epoch) and at every epoch end.
    const flags = [...BASE, '--epochs', '3', '--checkpoint-every-steps', '3'];
    const reference = join(tempDir(), 'reference');
    const straight = ssl([...flags, '--run-dir', reference]);
    assert.equal(straight.status, 0, straight.stderr);

    const crashed = join(tempDir(), 'crashed');
    const last = join(crashed, 'checkpoints', 'last.ckpt');
    const { killedAt, signal } = await killAfterMidEpochCheckpoint([...flags, '--run-dir', crashed], crashed, 90_000);
    assert.ok(killedAt, 'the run was killed mid-epoch after a checkpoint (it ended or timed out first)');
    assert.equal(signal, 'SIGKILL');
    assert.ok(
      trainRows(metrics(crashed)).some((r) => (r.step as number) > killedAt!.step),
      'steps after the checkpoint were logged before the kill',
    );

    const resumed = ssl([...flags, '--run-dir', crashed, '--resume', 'auto']);
    assert.equal(resumed.status, 0, resumed.stderr);
    const epoch = killedAt.epoch + 1;
    assert.ok(
      resumed.stderr.includes(`ssl-train: resuming from ${last} (epoch ${epoch}, batch ${killedAt.batchInEpoch}, step ${killedAt.step})\n`),
      `resume line, got:\n${resumed.stderr}`,
    );

    // The history: every training step exactly once, the validation of every epoch once,
    // and the values of the uninterrupted run, bit for bit.
    const rows = metrics(crashed);
    assert.deepEqual(
      trainRows(rows).map((r) => r.step),
      Array.from({ length: 24 }, (_, i) => i + 1),
    );
    assert.deepEqual(
      valRows(rows).map((r) => r.step),
      [8, 16, 24],
    );
    assert.deepEqual(rows.map(comparable), metrics(reference).map(comparable));
    // The final parameters, buffers and optimizer state, bit for bit.
    const a = tensors(join(reference, 'checkpoints', 'last.ckpt'));
    const b = tensors(last);
    assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
    for (const name of Object.keys(a)) assert.deepEqual(b[name], a[name], name);
    assert.deepEqual(readdirSync(join(crashed, 'checkpoints')).sort(), ['epoch-1.ckpt', 'epoch-2.ckpt', 'epoch-3.ckpt', 'last.ckpt']);
    assert.equal(summary(crashed).status, 'success');
    assert.equal(summary(crashed).step, 24);
  });

  describe('--resume auto picks the newest valid checkpoint', () => {
    // 12 steps: epoch-1.ckpt (step 8, end of epoch 1) and last.ckpt (step 12, mid-epoch 2).
    const flags = [...BASE, '--epochs', '2', '--max-steps', '12', '--val-every', '0'];
    let runDir: string;
    let firstAttempt: Row[];
    before(() => {
      runDir = join(tempDir(), 'run');
      const r = ssl([...flags, '--run-dir', runDir]);
      assert.equal(r.status, 0, r.stderr);
      firstAttempt = metrics(runDir);
    });

    it('by the step recorded inside, not by file name or modification time', () => {
      const dir = join(runDir, 'checkpoints');
      copyFileSync(join(dir, 'epoch-1.ckpt'), join(dir, 'zz-epoch-1-copy.ckpt'));
      const future = new Date(Date.now() + 3600_000);
      utimesSync(join(dir, 'zz-epoch-1-copy.ckpt'), future, future);
      const r = ssl([...flags, '--run-dir', runDir, '--resume', 'auto']);
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stderr, `ssl-train: resuming from ${join(dir, 'last.ckpt')} (epoch 2, batch 4, step 12)\n`);
      assert.deepEqual(metrics(runDir).map(comparable), firstAttempt.map(comparable));
    });

    for (const [what, corrupt, reason] of [
      [
        'truncated',
        (path: string) => truncateSync(path, Math.floor(readFileSync(path).byteLength / 2)),
        /it is truncated \(tensor '.*' ends past the end of the file\)/,
      ],
      [
        'corrupt (one flipped byte)',
        (path: string) => {
          const bytes = readFileSync(path);
          bytes[bytes.byteLength - 100] ^= 0x40;
          writeFileSync(path, bytes);
        },
        /it is corrupt \(its tensor data does not match its checksum\)/,
      ],
    ] as const) {
      it(`a ${what} newest checkpoint is skipped with a warning naming it, and the older valid one is used`, () => {
        const dir = join(runDir, 'checkpoints');
        const last = join(dir, 'last.ckpt');
        assert.equal(progressOf(last)?.step, 12);
        corrupt(last);
        const r = ssl([...flags, '--run-dir', runDir, '--resume', 'auto']);
        assert.equal(r.status, 0, r.stderr);
        const lines = r.stderr.trim().split('\n');
        assert.equal(lines.length, 2, r.stderr);
        assert.ok(lines[0].startsWith(`ssl-train: warning: --resume auto: skipping ${last}: `), lines[0]);
        assert.match(lines[0], reason);
        assert.equal(lines[1], `ssl-train: resuming from ${join(dir, 'epoch-1.ckpt')} (end of epoch 1, step 8)`);
        // Steps 9-12 were redone (same values) and appear once; last.ckpt is whole again.
        assert.deepEqual(metrics(runDir).map(comparable), firstAttempt.map(comparable));
        assert.equal(progressOf(last)?.step, 12);
      });
    }
  });

  it('--resume auto with no checkpoint says it starts fresh (and drops the history of an attempt that crashed before its first checkpoint)', () => {
    const runDir = join(tempDir(), 'run');
    mkdirSync(join(runDir, 'checkpoints'), { recursive: true });
    writeFileSync(join(runDir, 'metrics.jsonl'), '{"step":1,"train/loss":99}\n{"step":2,"train/loss":98}\n{"step":3,"tra');
    writeFileSync(join(runDir, 'checkpoints', 'last.ckpt.tmp-999999'), 'half a checkpoint');
    const r = ssl([...BASE, '--epochs', '1', '--max-steps', '2', '--val-every', '0', '--run-dir', runDir, '--resume', 'auto']);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr, `ssl-train: --resume auto: no checkpoint in ${join(runDir, 'checkpoints')}; starting fresh\n`);
    const rows = metrics(runDir);
    assert.deepEqual(
      rows.map((row) => row.step),
      [1, 2],
    );
    assert.ok(
      rows.every((row) => (row['train/loss'] as number) < 90),
      "the earlier attempt's rows are gone",
    );
    assert.deepEqual(readdirSync(join(runDir, 'checkpoints')), ['last.ckpt'], 'the stray temporary file is removed');
  });

  describe('a NaN stops the run', () => {
    /** The NaN test method, poisoned at step 6; last.ckpt every 2 steps. */
    const flags = [...BASE, '--method', 'simclr_nan', '--epochs', '2', '--val-every', '0', '--checkpoint-every-steps', '2', '--method-arg', 'nanAtStep=6'];

    function assertStopped(r: Run, runDir: string, message: RegExp, lastGood: number): void {
      assert.equal(r.status, 1, r.stderr);
      const errors = r.stderr.trim().split('\n');
      assert.ok(errors.length >= 1 && errors.every((l) => l === errors[0]), `one message, got:\n${r.stderr}`);
      assert.match(errors[0], message);
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
      const s = summary(runDir);
      assert.equal(s.status, 'failed');
      assert.equal(s.reason, errors[0].replace(/^ssl-train: error: /, ''));
      assert.equal(s.step, lastGood);
      const rows = metrics(runDir);
      assert.equal(Math.max(...rows.map((row) => row.step as number)), lastGood, 'nothing logged from the bad step on');
      assert.ok(
        rows.every((row) => Object.values(row).every((v) => v !== null)),
        'no NaN in the history',
      );
      assert.ok(verifyCheckpoint(join(runDir, 'checkpoints', 'last.ckpt')).ok, 'the last checkpoint is valid and finite');
    }

    it('NaN loss: exit 1 with one message naming the step and the term, summary "failed" with the reason, the last good checkpoint byte-identical', () => {
      const runDir = join(tempDir(), 'run');
      // Steps 1-4 first (last.ckpt at step 4), then on to the NaN at step 6.
      const first = ssl([...flags, '--max-steps', '4', '--run-dir', runDir], { nan: true });
      assert.equal(first.status, 0, first.stderr);
      const last = join(runDir, 'checkpoints', 'last.ckpt');
      const good = readFileSync(last);
      assert.equal(progressOf(last)?.step, 4);
      const r = ssl([...flags, '--run-dir', runDir, '--resume', 'auto'], { nan: true });
      // Step 5 ran (no checkpoint: 5 is odd), step 6 was the NaN: its update was not applied
      // and no checkpoint was written at it, so last.ckpt is still the one of step 4.
      const stderr = r.stderr
        .split('\n')
        .filter((l) => !l.startsWith('ssl-train: resuming from'))
        .join('\n');
      assertStopped(
        { ...r, stderr },
        runDir,
        new RegExp(
          `^ssl-train: error: training stopped at step 6 \\(epoch 1\\): train/loss is NaN .*at lr [0-9.e+-]+; the last good checkpoint is ${last} \\(step 4\\)$`,
        ),
        5,
      );
      assert.ok(readFileSync(last).equals(good), 'last.ckpt is byte-identical');
      assert.deepEqual(readdirSync(join(runDir, 'checkpoints')), ['last.ckpt']);
    });

    it('a non-finite gradient with a finite loss stops the run too, naming the parameter', () => {
      const runDir = join(tempDir(), 'run');
      const r = ssl([...flags, '--method-arg', 'nanKind=1', '--run-dir', runDir], { nan: true });
      assertStopped(
        r,
        runDir,
        /^ssl-train: error: training stopped at step 6 \(epoch 1\): the gradient of classifier\.weight is not finite at lr .*; the last good checkpoint is .*last\.ckpt \(step 4\)$/,
        5,
      );
      assert.equal(progressOf(join(runDir, 'checkpoints', 'last.ckpt'))?.step, 4);
    });

    it('a diverging run (sgd, lr 1e30) stops at its first non-finite loss instead of logging null losses', () => {
      const runDir = join(tempDir(), 'run');
      const r = ssl([...BASE, '--optimizer', 'sgd', '--lr', '1e30', '--warmup-epochs', '0', '--epochs', '2', '--val-every', '0', '--run-dir', runDir]);
      assert.equal(r.status, 1, r.stderr);
      assert.match(
        r.stderr.trim(),
        /^ssl-train: error: training stopped at step \d+ \(epoch 1\): (train\/\w+ is (NaN|Inf|-Inf)|.* became non-finite after the update)/,
      );
      const s = summary(runDir);
      assert.equal(s.status, 'failed');
      assert.match(String(s.reason), /^training stopped at step/);
      assert.ok(
        metrics(runDir).every((row) => Object.values(row).every((v) => v !== null)),
        'no NaN in the history',
      );
      assert.ok(!existsSync(join(runDir, 'checkpoints', 'last.ckpt')) || verifyCheckpoint(join(runDir, 'checkpoints', 'last.ckpt')).ok);
    });

    it('on 2 ranks (--devices 2), a NaN on rank 1 only stops both ranks at the same step: exit 1, no hang, the checkpoint untouched', () => {
      const runDir = join(tempDir(), 'run');
      // NaN at step 10 on rank 1; the first attempt ends at step 8, an epoch end (its
      // last.ckpt is written once there, by rank 0, with every rank taking part).
      const ddp = [...flags, '--method-arg', 'nanAtStep=10', '--method-arg', 'nanRank=1', '--devices', '2', '--timeout', '60', '--run-dir', runDir];
      const first = ssl([...ddp, '--max-steps', '8'], { nan: true, timeoutMs: 90_000 });
      assert.equal(first.status, 0, first.stderr);
      const last = join(runDir, 'checkpoints', 'last.ckpt');
      const good = readFileSync(last);
      const started = Date.now();
      const r = ssl([...ddp, '--resume', 'auto'], { nan: true, timeoutMs: 90_000 });
      // Rank 0 computed no NaN: it stopped at step 10 because the ranks agree through the
      // metrics all-reduce (a rank that went on would wait for rank 1 until --timeout).
      const stderr = r.stderr
        .split('\n')
        .filter((l) => !l.startsWith('ssl-train: resuming from'))
        .join('\n');
      assertStopped(
        { ...r, stderr },
        runDir,
        new RegExp(`^ssl-train: error: training stopped at step 10 \\(epoch 2\\): train/loss is NaN .*; the last good checkpoint is ${last} \\(step 8\\)$`),
        9,
      );
      assert.ok(Date.now() - started < 50_000, `took ${Date.now() - started} ms`);
      assert.ok(readFileSync(last).equals(good), 'last.ckpt is byte-identical');
    });

    it('on 2 ranks started like torchrun, both processes exit 1 with the same message', async () => {
      const runDir = join(tempDir(), 'run');
      const store = tempDir('ssl-zoo-store-');
      const args = ['--import', NAN_METHOD, CLI, ...flags, '--method-arg', 'nanRank=1', '--timeout', '60', '--run-dir', runDir];
      const ranks = [0, 1].map((rank) => {
        const env = {
          ...process.env,
          RANK: String(rank),
          WORLD_SIZE: '2',
          LOCAL_RANK: String(rank),
          LOCAL_WORLD_SIZE: '2',
          SSL_ZOO_RENDEZVOUS: `file://${store}`,
          SSL_ZOO_NUM_THREADS: '1',
        };
        const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
        let stderr = '';
        child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        return new Promise<{ code: number | null; stderr: string }>((resolve) => {
          const guard = setTimeout(() => child.kill('SIGKILL'), 90_000);
          child.on('exit', (code) => {
            clearTimeout(guard);
            resolve({ code, stderr });
          });
        });
      });
      const [rank0, rank1] = await Promise.all(ranks);
      const message = /^ssl-train: error: training stopped at step 6 \(epoch 1\): train\/loss is NaN /;
      assert.equal(rank0.code, 1, rank0.stderr);
      assert.equal(rank1.code, 1, rank1.stderr);
      assert.match(rank0.stderr.trim(), message);
      assert.match(rank1.stderr.trim(), message);
      assert.equal(summary(runDir).status, 'failed');
    });
  });
});

/**
 * The run directory's lock (src/trainer/run-lock.ts): acquire and release, a lock held by a
 * live process, a stale one, one from another host, an unreadable one, and two takers of the
 * same stale lock interleaved: exactly one wins (several processes at once:
 * run-lock-race.full.test.ts).
 */
import { strict as assert } from 'node:assert';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { UserError } from '../../src/core/errors.js';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { prepareExperiment } from '../../src/experiment/experiment.js';
import { loadPretrainedBackbone, resolvePretrained } from '../../src/experiment/pretrained.js';
import { runTraining } from '../../src/experiment/train.js';
import { parseMetricsJsonl } from '../../src/trainer/run-dir.js';
import { acquireRunLock, checkRunDirFree, readRunLock, removeLockIfUnchanged, runLockPath } from '../../src/trainer/run-lock.js';
import { deadPid, writeLock } from '../helpers/run-lock.js';
import { tempDir } from '../helpers/run.js';

function collectWarnings(): { warnings: string[]; warn: (line: string) => void } {
  const warnings: string[] = [];
  return { warnings, warn: (line) => warnings.push(line) };
}

describe('run directory lock', () => {
  it('is taken with pid, host, start time and command, refuses a second taker, and is released', () => {
    const dir = join(tempDir(), 'run');
    const lock = acquireRunLock(dir, { command: 'ssl-train --method byol' });
    const holder = readRunLock(dir);
    assert.equal(holder?.pid, process.pid);
    assert.equal(holder?.host, hostname());
    assert.equal(holder?.command, 'ssl-train --method byol');
    assert.ok(Math.abs(Date.parse(holder.startedAt) - Date.now()) < 60_000);
    assert.throws(
      () => acquireRunLock(dir),
      (e: unknown) =>
        e instanceof UserError &&
        new RegExp(
          `^run directory ${dir} is in use by pid ${process.pid} on host ${hostname()} since \\d\\d:\\d\\d:\\d\\d \\(ssl-train --method byol\\); wait for it, or pass --force-unlock if that run is gone$`,
        ).test(e.message),
    );
    assert.throws(() => checkRunDirFree(dir), /is in use by pid/);
    lock.release();
    assert.equal(existsSync(runLockPath(dir)), false);
    assert.equal(existsSync(dir), false, 'the directory the lock created stays only when the run wrote into it');
    checkRunDirFree(dir);
  });

  it('keeps a directory that holds files, and keeps a lock another run took over', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'config.json'), '{}\n');
    const first = acquireRunLock(dir);
    const { warnings, warn } = collectWarnings();
    const second = acquireRunLock(dir, { forceUnlock: true, warn });
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], new RegExp(`^ssl-train: warning: --force-unlock: taking over the lock of run directory ${dir} from pid ${process.pid} on host`));
    first.release();
    assert.equal(readRunLock(dir)?.token, second.holder.token, "the first run's release leaves the second run's lock");
    second.release();
    assert.equal(existsSync(runLockPath(dir)), false);
    assert.ok(existsSync(join(dir, 'config.json')));
  });

  it('takes over a stale lock (dead pid on this host) with one warning', () => {
    const dir = tempDir();
    const pid = deadPid();
    writeLock(dir, pid);
    checkRunDirFree(dir); // stale: no obstacle
    const { warnings, warn } = collectWarnings();
    const lock = acquireRunLock(dir, { warn });
    assert.deepEqual(warnings.length, 1);
    assert.match(
      warnings[0],
      new RegExp(`^ssl-train: warning: run directory ${dir}: taking over the lock of pid ${pid} on host .*, which is no longer running$`),
    );
    assert.equal(readRunLock(dir)?.pid, process.pid);
    lock.release();
  });

  it('respects a lock from another host unless forced', () => {
    const dir = tempDir();
    writeLock(dir, deadPid(), 'other-host.invalid');
    const before = readFileSync(runLockPath(dir), 'utf8');
    assert.throws(
      () => acquireRunLock(dir),
      /is in use by pid \d+ on host other-host\.invalid since .* \(another host: whether it still runs cannot be checked from here\); wait for it, or pass --force-unlock/,
    );
    assert.throws(() => checkRunDirFree(dir), /on host other-host\.invalid/);
    assert.equal(readFileSync(runLockPath(dir), 'utf8'), before, 'a refused run leaves the lock as it was');
    checkRunDirFree(dir, { forceUnlock: true });
    const { warnings, warn } = collectWarnings();
    const lock = acquireRunLock(dir, { forceUnlock: true, warn });
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /--force-unlock: taking over the lock .* on host other-host\.invalid/);
    lock.release();
  });

  it('refuses an unreadable lock file (it names no holder) unless forced', () => {
    const dir = tempDir();
    writeFileSync(runLockPath(dir), '');
    assert.throws(() => acquireRunLock(dir), /is locked by .*ssl-train\.lock, which names no holder .*; pass --force-unlock if no run is using it/);
    const { warnings, warn } = collectWarnings();
    acquireRunLock(dir, { forceUnlock: true, warn }).release();
    assert.match(warnings[0], /taking over the lock of run directory .* from an unreadable lock file/);
  });

  it('says in one line when the lock cannot be made (the run directory cannot be created)', () => {
    const file = join(tempDir(), 'a-file');
    writeFileSync(file, '');
    assert.throws(
      () => acquireRunLock(join(file, 'run')),
      (e: unknown) => e instanceof UserError && /^run directory .*a-file\/run: cannot take its lock: ENOTDIR: not a directory/.test(e.message),
    );
  });

  it('takes over a stale lock only while it is unchanged (two takers interleaved)', () => {
    const dir = tempDir();
    writeLock(dir, deadPid());
    const path = runLockPath(dir);
    const stale = readFileSync(path, 'utf8'); // taker B judges it stale here ...
    const a = acquireRunLock(dir, { warn: () => {} }); // ... taker A takes it over first
    const held = readFileSync(path, 'utf8');
    assert.equal(removeLockIfUnchanged(path, stale, 'taker-b'), false, "B must not remove A's lock");
    assert.equal(readFileSync(path, 'utf8'), held, "A's lock is back in place");
    assert.throws(() => acquireRunLock(dir), /is in use by pid/, 'B, going round again, finds A alive');
    a.release();
    // The lock moved away by the other taker between B's read and B's removal: nothing to remove.
    writeLock(dir, deadPid());
    const seen = readFileSync(path, 'utf8');
    assert.equal(removeLockIfUnchanged(path, seen, 'taker-a'), true);
    assert.equal(existsSync(path), false);
    assert.equal(removeLockIfUnchanged(path, seen, 'taker-b'), false);
    assert.deepEqual(
      readdirSync(dir).filter((n) => n.startsWith('ssl-train.lock')),
      [],
      'no temporary or moved lock file is left behind',
    );
  });
});

/** A tiny run: SimCLR, an MLP on 64 synthetic 16 x 16 images, batch 16, no validation. */
const SMALL: TrainConfigInput = {
  ...{ method: 'simclr', dataset: 'synthetic', imageSize: 16, syntheticSize: 64, backbone: 'mlp', batchSize: 16, workers: 0, valEvery: 0 },
  methodArgs: { projHiddenDim: 16, projOutputDim: 8 },
};

describe('runTraining and the lock', () => {
  it('releases the lock in its finally when the run fails (not only at process exit)', async () => {
    const dir = tempDir();
    mkdirSync(join(dir, 'checkpoints'));
    writeFileSync(join(dir, 'checkpoints', 'last.ckpt'), 'not a checkpoint');
    const exitListeners = process.listenerCount('exit');
    const config = buildConfig({ ...SMALL, maxSteps: 1, runDir: dir, resume: 'auto' });
    const stderrWrite = process.stderr.write;
    process.stderr.write = () => true; // the skipped checkpoint's warning
    try {
      await assert.rejects(runTraining(config, { callbacks: [] }), /resume: no valid checkpoint/);
    } finally {
      process.stderr.write = stderrWrite;
    }
    assert.equal(existsSync(runLockPath(dir)), false);
    assert.equal(process.listenerCount('exit'), exitListeners, 'released: its exit hook is gone too');
  });
});

describe('the checkpoint of a run that is still training', () => {
  it('is read whole, and the step recorded is that of the weights loaded when last.ckpt was replaced since it was resolved', async () => {
    const [running, later] = [tempDir(), tempDir()];
    await runTraining(buildConfig({ ...SMALL, maxSteps: 1, runDir: running }), { callbacks: [] });
    await runTraining(buildConfig({ ...SMALL, maxSteps: 3, runDir: later }), { callbacks: [] });
    const source = resolvePretrained(running, 'RUN_DIR');
    assert.equal(source.step, 1);
    // The running run checkpoints again (a temporary file renamed over last.ckpt) before the weights are read.
    const last = join(running, 'checkpoints', 'last.ckpt');
    copyFileSync(join(later, 'checkpoints', 'last.ckpt'), `${last}.tmp-1`);
    renameSync(`${last}.tmp-1`, last);
    const method = prepareExperiment(source.config).createMethod();
    try {
      loadPretrainedBackbone(method, source, 'RUN_DIR');
    } finally {
      method.dispose();
    }
    assert.equal(source.step, 3);
  });
});

describe('metrics.jsonl read while a run appends to it', () => {
  it('leaves out a last line without its newline that is not JSON yet, and only that', () => {
    const rows = parseMetricsJsonl('{"step": 1, "train/loss": 2}\n{"step": 2, "train/lo', 'm.jsonl');
    assert.deepEqual(
      rows.map((r) => r.step),
      [1],
    );
    // Complete but for its newline: kept.
    assert.deepEqual(
      parseMetricsJsonl('{"step": 1}\n{"step": 2, "train/loss": 3}', 'm.jsonl').map((r) => r.values),
      [{}, { 'train/loss': 3 }],
    );
    // A line ended by its newline is finished: malformed is an error, last or not.
    assert.throws(() => parseMetricsJsonl('{"step": 1}\n{"step": 2, "tr\n', 'm.jsonl'), /m\.jsonl:2: not a JSON object/);
    assert.throws(() => parseMetricsJsonl('{"step": 1, "tr\n{"step": 2}', 'm.jsonl'), /m\.jsonl:1: not a JSON object/);
  });
});

/**
 * `ssl-train linear` run by the trainer, through real processes: killed with SIGKILL after a
 * checkpoint, it resumes with `--resume auto` to the result of an uninterrupted run; on 2
 * ranks (the launcher, Gloo on loopback) it gives the result of one process, fine-tuning
 * (SyncBatchNorm) and on precomputed features (computed a half per rank).
 */
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';
import { checkpointArrays as tensors, comparableRow as comparable, killAfterMidEpochCheckpoint, metricsRows as metrics } from '../helpers/run-files.js';

const dir = tempDir('ssl-zoo-linear-');
const source = join(dir, 'pretrain');

/** Fine-tuning on crop-flip views, batch 32 of the 256 synthetic images: 8 steps per epoch, every step logged. */
const FINETUNE = ['--finetune', '--augmentation', 'crop-flip', '--batch-size', '32', '--log-every', '1'];

function json(text: string): Record<string, unknown> {
  return JSON.parse(text) as Record<string, unknown>;
}

function summary(runDir: string): Record<string, unknown> {
  return json(readFileSync(join(runDir, 'summary.json'), 'utf8'));
}

/** `ssl-train linear source args... --run-dir runDir` to completion; its JSON line. */
function linear(args: string[], runDir: string): Record<string, unknown> {
  const r = runCli(['linear', source, ...args, '--run-dir', runDir], 240_000);
  assert.equal(r.status, 0, r.stderr);
  return json(r.stdout.trim().split('\n').at(-1)!);
}

/** The largest difference between the float tensors named `prefix*` of two checkpoints, relative to the largest value. */
function relativeDifference(a: string, b: string, prefix: string): number {
  const [x, y] = [tensors(a), tensors(b)];
  const names = Object.keys(x).filter((n) => n.startsWith(prefix));
  assert.ok(names.length > 0, `no ${prefix}* tensor`);
  let diff = 0;
  let scale = 0;
  for (const n of names) {
    x[n].forEach((v, i) => {
      diff = Math.max(diff, Math.abs(v - y[n][i]));
      scale = Math.max(scale, Math.abs(v));
    });
  }
  return diff / scale;
}

describe('ssl-train linear through the trainer: resume after SIGKILL, 2 ranks', function () {
  this.timeout(600_000);

  before(() => {
    const r = runCli([...SMOKE_FLAGS, '--epochs', '1', '--val-every', '0', '--run-dir', source]);
    assert.equal(r.status, 0, r.stderr);
  });

  it('killed with SIGKILL after a mid-epoch checkpoint, --resume auto continues to the uninterrupted result (history, weights, optimizer state)', async () => {
    // 3 epochs of 8 steps, last.ckpt every 3 steps (mid-epoch) and at every epoch end.
    const flags = [...FINETUNE, '--epochs', '3', '--checkpoint-every-steps', '3'];
    const reference = join(dir, 'reference');
    const straight = linear(flags, reference);

    const crashed = join(dir, 'crashed');
    const last = join(crashed, 'checkpoints', 'last.ckpt');
    const { killedAt, signal } = await killAfterMidEpochCheckpoint(['linear', source, ...flags, '--run-dir', crashed], crashed, 120_000);
    assert.ok(killedAt, 'the run was killed mid-epoch after a checkpoint (it ended or timed out first)');
    assert.equal(signal, 'SIGKILL');
    assert.ok(!existsSync(join(crashed, 'summary.json')), 'the killed run wrote no summary');

    const resumed = runCli(['linear', source, ...flags, '--run-dir', crashed, '--resume', 'auto'], 240_000);
    assert.equal(resumed.status, 0, resumed.stderr);
    assert.ok(
      resumed.stderr.includes(`ssl-train: resuming from ${last} (epoch ${killedAt.epoch + 1}, batch ${killedAt.batchInEpoch}, step ${killedAt.step})\n`),
      `resume line, got:\n${resumed.stderr}`,
    );
    const out = json(resumed.stdout.trim().split('\n').at(-1)!);
    assert.deepEqual({ ...out, runDir: undefined }, { ...straight, runDir: undefined });
    assert.equal(out.epochs, 3);

    // Every step logged once, each epoch validated once, with the values of the uninterrupted run.
    const rows = metrics(crashed);
    assert.deepEqual(
      rows.filter((r) => r['train/loss'] !== undefined).map((r) => r.step),
      Array.from({ length: 24 }, (_, i) => i + 1),
    );
    assert.deepEqual(
      rows.filter((r) => r['val/acc1'] !== undefined).map((r) => r.step),
      [8, 16, 24],
    );
    assert.deepEqual(rows.map(comparable), metrics(reference).map(comparable));
    const [a, b] = [tensors(join(reference, 'checkpoints', 'last.ckpt')), tensors(last)];
    assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
    assert.ok(
      Object.keys(a).some((n) => n.startsWith('optimizer/')),
      'the optimizer state is checkpointed',
    );
    for (const name of Object.keys(a)) assert.deepEqual(b[name], a[name], name);
    assert.equal(summary(crashed).status, 'success');
    assert.equal(summary(crashed)['val/acc1'], summary(reference)['val/acc1']);
  });

  for (const [what, flags] of [
    ['fine-tuning on crop-flip views (SyncBatchNorm)', [...FINETUNE, '--epochs', '2']],
    ['on precomputed features, a half computed per rank', ['--batch-size', '32', '--epochs', '3']],
  ] as const) {
    it(`2 ranks give the result of one process to round-off: ${what}`, () => {
      const one = join(dir, `one-${what.length}`);
      const two = join(dir, `two-${what.length}`);
      const single = linear([...flags], one);
      const ranks = linear([...flags, '--devices', '2'], two);
      assert.equal(json(readFileSync(join(two, 'config.json'), 'utf8')).worldSize, 2);
      assert.equal(json(readFileSync(join(two, 'config.json'), 'utf8')).localBatch, 16);
      const [s, r] = [summary(one), summary(two)];
      assert.equal(r.status, 'success');
      assert.equal(r.step, s.step);
      const close = (key: string, bound: number) => assert.ok(Math.abs((r[key] as number) - (s[key] as number)) <= bound, `${key}: ${r[key]} vs ${s[key]}`);
      close('val/loss', 1e-5 * Math.max(1, Math.abs(s['val/loss'] as number)));
      // A test image within round-off of a decision boundary may change sides: one image at most.
      const valSize = json(readFileSync(join(one, 'config.json'), 'utf8')).valSize as number;
      close('val/acc1', 1 / valSize + 1e-9);
      close('val/acc5', 1 / valSize + 1e-9);
      assert.equal(ranks.epochs, single.epochs);
      // The training loss of every step (averaged over the ranks) and the trained weights.
      const losses = (runDir: string) => metrics(runDir).flatMap((row) => (row['train/loss'] === undefined ? [] : [row['train/loss'] as number]));
      const [l1, l2] = [losses(one), losses(two)];
      assert.equal(l2.length, l1.length);
      l1.forEach((v, i) => assert.ok(Math.abs(l2[i] - v) <= 1e-5 * Math.max(1, Math.abs(v)), `step ${i + 1}: loss ${l2[i]} vs ${v}`));
      const ckpt = (runDir: string) => join(runDir, 'checkpoints', 'last.ckpt');
      assert.ok(relativeDifference(ckpt(one), ckpt(two), 'model/classifier.') < 1e-5);
      assert.ok(relativeDifference(ckpt(one), ckpt(two), 'model/backbone.') < 1e-5);
    });
  }
});

/**
 * Resuming cuts the W&B history back to the checkpoint (the local history's cut is
 * tests/trainer/non-finite.test.ts): a run that crashed after a checkpoint continues its W&B
 * run, against a fake W&B server, and re-sends each step once.
 */
import { strict as assert } from 'node:assert';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint, savedProgress } from '../../src/trainer/checkpoint.js';
import { readWandbRunInfo } from '../../src/tracking/identity.js';
import { localHistory, metricsLines, trainWithWandb, useFakeWandb } from './helpers.js';

describe('resuming cuts the W&B history back to the checkpoint', function () {
  this.timeout(180_000);
  const wandb = useFakeWandb();

  it('a run that crashed after its epoch-1 checkpoint continues its W&B run and re-sends the history cut back to that checkpoint', async () => {
    // 12 steps logged (every 2); then last.ckpt is lost: the newest checkpoint is
    // epoch-1.ckpt at step 8, as after a crash between steps 8 and 12.
    const first = await trainWithWandb({ maxSteps: 12 }, { env: wandb.env });
    rmSync(join(first.runDir, 'checkpoints', 'last.ckpt'));
    const id = readWandbRunInfo(first.runDir)?.id;
    assert.ok(id);
    const assertSent = (steps: number[]) => {
      const lines = metricsLines(first.runDir);
      assert.deepEqual(
        lines.map((l) => l.step),
        steps.flatMap((s) => (s % 8 === 0 ? [s, s] : [s])),
        'metrics.jsonl: each step once (epoch ends: training and validation)',
      );
      const rows = localHistory(first.runDir);
      const sent = wandb.server.run(id).history;
      assert.deepEqual(
        sent.map((l) => l._step),
        steps,
        'W&B history',
      );
      rows.forEach((row, i) => {
        for (const [key, value] of Object.entries(row.values)) assert.equal(sent[i][key], value, `step ${row.step}: ${key}`);
      });
    };
    // Resumed with nothing left to train (--max-steps 8): the history re-sent is the one
    // up to the checkpoint, without the rows of steps 10 and 12.
    wandb.server.run(id).history.length = 0;
    await trainWithWandb({ resume: 'auto', maxSteps: 8 }, { env: wandb.env }, first.runDir);
    assert.equal(readWandbRunInfo(first.runDir)?.id, id, 'the same W&B run');
    assertSent([2, 4, 6, 8]);
    // Resumed to the end: every step once, locally and in W&B.
    wandb.server.run(id).history.length = 0;
    await trainWithWandb({ resume: 'auto' }, { env: wandb.env }, first.runDir);
    assertSent([2, 4, 6, 8, 10, 12, 14, 16]);
    const ckpt = loadCheckpoint(join(first.runDir, 'checkpoints', 'last.ckpt'));
    tf.dispose(Object.values(ckpt.tensors));
    assert.equal(savedProgress(ckpt.meta)?.step, 16);
  });
});

/**
 * `bench:zoo --resume` (scripts/bench/zoo-recipe.ts): a method's run continues from its
 * `last.ckpt` only when its run directory records the same recipe; options outside the recipe
 * (checkpointing, validation, where it resumes) do not change the fingerprint; a fresh start
 * removes a checkpoint of another recipe.
 */
import { strict as assert } from 'node:assert';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { fingerprint, prepareRun } from '../../scripts/bench/zoo-recipe.js';
import { tempDir } from '../helpers/run.js';

const SMALL: TrainConfigInput = {
  ...{ method: 'simclr', dataset: 'synthetic', imageSize: 16, syntheticSize: 64, backbone: 'mlp', batchSize: 16, workers: 0 },
  ...{ backend: 'cpu-js', valEvery: 0, logEvery: 1, epochs: 3, maxSteps: 2, checkpointEverySteps: 1, methodArgs: { projHiddenDim: 16, projOutputDim: 8 } },
};

describe('bench:zoo --resume: where a row continues', function () {
  this.timeout(120_000);

  it('from last.ckpt of the same recipe only; without --resume, or a damaged or other-recipe checkpoint, fresh, saying why', async () => {
    const runDir = tempDir();
    const last = join(runDir, 'checkpoints', 'last.ckpt');
    const config = buildConfig({ ...SMALL, runDir });
    assert.equal(prepareRun(config, true), `starting fresh (no ${last})`);
    assert.equal(config.resume, undefined);
    await runTraining(config, { callbacks: [] });

    const again = buildConfig({ ...SMALL, runDir, checkpointEverySteps: 25, valEvery: 3, valAtStart: true, logEvery: 10 });
    assert.equal(fingerprint(again), fingerprint(config), 'checkpointing and validation are outside the recipe');
    assert.equal(prepareRun(again, true), `resuming from ${last}, step 2`);
    assert.equal(again.resume, last);
    assert.equal(fingerprint(again), fingerprint(config), 'so is where it resumes');

    for (const other of [{ lr: 0.5 }, { epochs: 4 }, { methodArgs: { projHiddenDim: 16, projOutputDim: 8, temperature: 0.2 } }]) {
      const changed = buildConfig({ ...SMALL, runDir, ...other });
      assert.equal(prepareRun(changed, true), `starting fresh (${last} trained another recipe (simclr, 3 epochs))`, JSON.stringify(other));
      assert.equal(changed.resume, undefined);
      assert.equal(existsSync(last), false, "the other recipe's checkpoint is gone");
      prepareRun(config, false); // the directory records the first recipe again
      await runTraining(buildConfig({ ...SMALL, runDir }), { callbacks: [] });
    }

    assert.equal(prepareRun(buildConfig({ ...SMALL, runDir }), false), 'starting fresh (without --resume)');
    assert.equal(existsSync(last), false);
    await runTraining(buildConfig({ ...SMALL, runDir }), { callbacks: [] });
    writeFileSync(last, 'not a checkpoint');
    const damaged = buildConfig({ ...SMALL, runDir });
    assert.match(prepareRun(damaged, true), /^starting fresh \(.*last\.ckpt cannot be read \(/);
    assert.equal(damaged.resume, undefined);
  });
});

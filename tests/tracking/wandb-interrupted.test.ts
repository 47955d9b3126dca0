/**
 * A run that a signal interrupted ends its W&B run with the exit code the CLI exits with
 * (128 + the signal's number: the JS SDK has no other way to say so), and its summary.json
 * says "interrupted". In-process, with the stop request injected as a library user would.
 */
import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { container as rootContainer } from 'tsyringe';
import { buildConfig } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { readWandbRunInfo } from '../../src/tracking/identity.js';
import { WandbLogger } from '../../src/tracking/logger.js';
import { LOGGER, RunDirLogger } from '../../src/trainer/loggers.js';
import { TrainingInterrupted, type StopRequest } from '../../src/trainer/stop-signal.js';
import { tempDir } from '../helpers/run.js';
import { TINY, useFakeWandb } from './helpers.js';

describe('W&B: an interrupted run', function () {
  this.timeout(120_000);
  const wandb = useFakeWandb();

  it('a stop requested (SIGTERM) before the first step: the run stops after it, W&B gets exit code 143, summary.json "interrupted"', async () => {
    const runDir = join(tempDir(), 'run');
    const logger = new WandbLogger({ runDir, env: wandb.env, retryDelaysMs: [50, 100], finishTimeoutMs: 15_000, print: () => undefined });
    const container = rootContainer.createChildContainer();
    container.registerInstance(LOGGER, new RunDirLogger(runDir));
    container.registerInstance(LOGGER, logger);
    const stop: StopRequest = { requested: 'SIGTERM' };
    await assert.rejects(
      runTraining(buildConfig({ ...TINY, runDir }), { container, callbacks: [], stop }),
      (e: unknown) => e instanceof TrainingInterrupted && e.step === 1 && e.exitCode === 143,
    );
    const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(summary.status, 'interrupted');
    assert.equal(summary.signal, 'SIGTERM');
    assert.equal(summary.step, 1);
    const id = readWandbRunInfo(runDir)?.id;
    assert.ok(id);
    const run = wandb.server.run(id);
    assert.equal(run.complete, true);
    assert.equal(run.exitcode, 143);
  });
});

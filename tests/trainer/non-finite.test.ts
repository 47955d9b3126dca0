/**
 * The trainer's non-finite stop and its run-directory bookkeeping, in process: a NaN loss
 * or gradient leaves the parameters of the step before (the update is not applied), an
 * update that overflows is never checkpointed, the loggers get the reason; plus the
 * history cut back on resume (locally; W&B's: tests/tracking/wandb-resume.full.test.ts) and the
 * --checkpoint-every-steps option.
 */
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Module } from '../../src/core/module.js';
import { tf, type Scalar } from '../../src/core/tf.js';
import { createOptimizer, toNamedParams } from '../../src/optim/index.js';
import { savedProgress, verifyCheckpoint } from '../../src/trainer/checkpoint.js';
import type { DataSource, TrainingModule } from '../../src/trainer/interfaces.js';
import type { Callback } from '../../src/trainer/callbacks.js';
import { RunDirLogger, type Logger } from '../../src/trainer/loggers.js';
import { SingleDeviceStrategy } from '../../src/trainer/strategy.js';
import { NonFiniteError, Trainer, type TrainerOptions } from '../../src/trainer/trainer.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

import { metricsLines } from '../tracking/helpers.js';

class Quadratic extends Module {
  readonly w = this.addParameter('w', tf.tensor1d([1, -2, 3, -4]));
}

type Poison = 'loss' | 'gradient' | undefined;

/** Loss sum(w²), SGD without momentum at `lr`; at step `at` (1-based) the loss or only the gradient is NaN. */
function quadratic(poison: Poison, at: number, lr = 0.1): TrainingModule<number> & { model: Quadratic } {
  const model = new Quadratic();
  let done = 0;
  return {
    model,
    trainingStep() {
      let loss = tf.sum(tf.square(model.w)) as Scalar;
      if (done + 1 === at && poison === 'loss') loss = tf.mul(loss, NaN) as Scalar;
      if (done + 1 === at && poison === 'gradient') loss = tf.add(loss, tf.mul(0, tf.sum(tf.sqrt(tf.sub(model.w, model.w))))) as Scalar;
      return { loss, metrics: { loss: tf.keep(loss.clone()) } };
    },
    configureOptimizers() {
      const optimizer = createOptimizer('sgd', [{ name: 'all', params: toNamedParams(model.namedParameters()), lr, weightDecay: 0 }], { momentum: 0 });
      return { optimizer, scheduler: { apply: () => ({ all: lr }) } };
    },
    onTrainBatchEnd(progress) {
      done = progress.step;
    },
  };
}

const data: DataSource<number> = {
  batchSize: 1,
  numBatches: () => 4,
  async *batches(_epoch, start) {
    for (let i = start; i < 4; i++) yield i;
  },
  close: async () => undefined,
};

function trainer(runDir: string, loggers: Logger[], options: Partial<TrainerOptions> = {}): Trainer {
  return new Trainer(new SingleDeviceStrategy(), loggers, {
    maxEpochs: 2,
    logEvery: 1,
    valEvery: 0,
    checkpointEvery: 1,
    checkpointEverySteps: 1,
    runDir,
    config: { seed: 0 },
    print: () => undefined,
    ...options,
  });
}

describe('non-finite values stop training', () => {
  for (const poison of ['loss', 'gradient'] as const) {
    it(`a NaN ${poison} at step 3: the update is not applied, no checkpoint at or after it, the loggers get the reason`, async () => {
      // The parameters after 2 good steps.
      const good = quadratic(undefined, 0);
      await trainer(tempDir(), [], { maxSteps: 2 }).fit(good, data);
      const expected = good.model.w.dataSync().slice();

      const runDir = tempDir();
      const module = quadratic(poison, 3);
      const finals: Array<{ status: string; reason?: string }> = [];
      const spy: Logger = {
        logHyperparams: () => undefined,
        logMetrics: () => undefined,
        finalize: (status, _summary, reason) => void finals.push({ status, reason }),
      };
      const error = await trainer(runDir, [new RunDirLogger(runDir), spy])
        .fit(module, data)
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(error instanceof NonFiniteError, `a NonFiniteError, got ${String(error)}`);
      assert.equal(error.step, 3);
      const what = poison === 'loss' ? 'train/loss is NaN' : 'the gradient of w is not finite';
      assert.equal(error.what, what);
      assert.equal(
        error.message,
        `training stopped at step 3 (epoch 1): ${what} at lr 0.1; the last good checkpoint is ${join(runDir, 'checkpoints', 'last.ckpt')} (step 2)`,
      );
      assert.deepEqual(module.model.w.dataSync(), expected, 'the parameters of step 2');
      assert.deepEqual(finals, [{ status: 'failed', reason: error.message }]);
      const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as Record<string, unknown>;
      assert.deepEqual([summary.status, summary.reason, summary.step], ['failed', error.message, 2]);
      const check = verifyCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
      assert.ok(check.ok);
      assert.equal(savedProgress(check.meta)?.step, 2);
    });
  }

  it('metrics stay on the device until a logging step, which hands every step to the callbacks, in order; a non-finite stop first hands over the steps before it', async () => {
    /** Trains `module` for one epoch (4 steps) logging every `logEvery`: what the callbacks saw ([step, steps run by then, loss]) and the error. */
    const fit = async (module: ReturnType<typeof quadratic>, logEvery: number) => {
      let ran = 0;
      const hook = module.onTrainBatchEnd!;
      module.onTrainBatchEnd = (p) => {
        ran = p.step;
        hook(p);
      };
      const seen: number[][] = [];
      const runDir = tempDir();
      const options = { maxEpochs: 1, logEvery, valEvery: 0, checkpointEvery: 0, runDir, config: { seed: 0 }, print: () => undefined };
      const callback: Callback = { onTrainBatchEnd: (p, m) => void seen.push([p.step, ran, m['train/loss']]) };
      const error = await new Trainer(new SingleDeviceStrategy(), [new RunDirLogger(runDir)], options, [callback]).fit(module, data).then(
        () => undefined,
        (e: unknown) => e,
      );
      return { seen, error, rows: existsSync(join(runDir, 'metrics.jsonl')) ? metricsLines(runDir).map((r) => r.step) : [] };
    };
    // Loss Σw² = 30 at the start; each step multiplies w by 0.8.
    const losses = [30, 19.2, 12.288, 7.86432];
    const good = await fit(quadratic(undefined, 0), 2);
    assert.equal(good.error, undefined);
    assert.deepEqual(
      good.seen.map(([step, ran]) => [step, ran]),
      [
        [1, 2],
        [2, 2],
        [3, 4],
        [4, 4],
      ],
      'steps 1 and 2 handed over after step 2, steps 3 and 4 after step 4',
    );
    good.seen.forEach(([, , loss], i) => assert.ok(Math.abs(loss - losses[i]) < 1e-4, `step ${i + 1}: loss ${loss}`));
    assert.deepEqual(good.rows, [2, 4], 'a row at each logging step');
    const bad = await fit(quadratic('loss', 3), 4);
    assert.ok(bad.error instanceof NonFiniteError && bad.error.step === 3, String(bad.error));
    assert.deepEqual(
      bad.seen.map(([step, ran]) => [step, ran]),
      [
        [1, 2],
        [2, 2],
      ],
    );
    assert.deepEqual(bad.rows, [], 'no logging step before the stop');
  });

  it('parameters that overflow in an update are never checkpointed: the run stops at that step', async () => {
    const runDir = tempDir();
    // lr 1e38: the loss of step 1 is finite, the update sends w to ±Inf.
    const error = await trainer(runDir, [new RunDirLogger(runDir)])
      .fit(quadratic(undefined, 0, 1e38), data)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(error instanceof NonFiniteError, String(error));
    assert.equal(
      error.message,
      'training stopped at step 1 (epoch 1): model/w became non-finite after the update at lr 1.00e+38; no checkpoint was written before it',
    );
    assert.ok(!existsSync(join(runDir, 'checkpoints', 'last.ckpt')));
  });

  it('nothing leaks when it stops a run', async () => {
    const before = tf.memory().numTensors;
    const module = quadratic('loss', 5);
    await trainer(tempDir(), [])
      .fit(module, data)
      .catch(() => undefined);
    module.model.dispose();
    assert.equal(tf.memory().numTensors, before);
  });
});

describe('resuming cuts the history back to the checkpoint', () => {
  it('RunDirLogger.beginAt keeps rows up to the step (atomically), drops a line cut short and the old summary', () => {
    const runDir = tempDir();
    const rows = [1, 2, 3, 4].map((step) => JSON.stringify({ step, 'train/loss': step }));
    writeFileSync(join(runDir, 'metrics.jsonl'), `${rows.join('\n')}\n{"step": 5, "tr`);
    writeFileSync(join(runDir, 'summary.json'), '{"status": "failed"}\n');
    new RunDirLogger(runDir).beginAt(2);
    assert.equal(readFileSync(join(runDir, 'metrics.jsonl'), 'utf8'), `${rows.slice(0, 2).join('\n')}\n`);
    assert.ok(!existsSync(join(runDir, 'summary.json')), 'an unfinished run has no summary');
  });
});

describe('--checkpoint-every-steps', () => {
  for (const bad of ['-1', '2.5', 'often']) {
    it(`rejects ${bad} with one line and exit code 2`, () => {
      const runDir = join(tempDir(), 'run');
      const { status, stderr } = runCli([...SMOKE_FLAGS, '--run-dir', runDir, '--max-steps', '1', '--checkpoint-every-steps', bad], 30_000);
      assert.equal(status, 2, stderr);
      const shown = JSON.stringify(Number.isNaN(Number(bad)) ? bad : Number(bad));
      assert.match(
        stderr.trim(),
        new RegExp(`^ssl-train: error: --checkpoint-every-steps: ${shown.replace('.', '\\.')} is not allowed; expected an integer( >= 0)?$`),
      );
    });
  }
});

import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { wandbSync } from '../../src/cli/wandb-sync.js';
import { readWandbRunInfo } from '../../src/tracking/identity.js';
import type { HistoryRow } from '../../src/trainer/run-dir.js';
import type { FakeRun } from './fake-wandb.js';
import { closedPort, localHistory, metricsLines, trainWithWandb, useFakeWandb } from './helpers.js';

/** Every local history row reached the server at its line, with the same values and `_step`. */
function assertHistoryDelivered(run: FakeRun, rows: HistoryRow[]): void {
  assert.equal(run.history.length, rows.length, `history lines on the server (${run.history.length}) vs local rows (${rows.length})`);
  rows.forEach((row, i) => {
    const line = run.history[i];
    assert.ok(line, `history line ${i} is missing`);
    assert.equal(line._step, row.step, `line ${i}: _step`);
    for (const [key, value] of Object.entries(row.values)) {
      assert.equal(line[key], value, `line ${i} (step ${row.step}): ${key}`);
    }
  });
}

/** What every finished tiny run (2 epochs of 8 steps, metrics every 2 steps) holds locally. */
function assertLocalRunComplete(runDir: string): void {
  const lines = metricsLines(runDir);
  const trainSteps = lines.filter((l) => 'train/loss' in l).map((l) => l.step);
  assert.deepEqual(trainSteps, [2, 4, 6, 8, 10, 12, 14, 16], 'training metrics of every logged step');
  const valSteps = lines.filter((l) => 'val/knn_acc1' in l).map((l) => l.step);
  assert.deepEqual(valSteps, [8, 16], 'validation metrics after each epoch');
  const summary = JSON.parse(readFileSync(join(runDir, 'summary.json'), 'utf8')) as Record<string, unknown>;
  assert.equal(summary.status, 'success');
  assert.ok(existsSync(join(runDir, 'checkpoints', 'last.ckpt')), 'last checkpoint');
}

describe('W&B logger against a local W&B server (real @wandb/sdk)', function () {
  this.timeout(180_000);
  const wandb = useFakeWandb();
  beforeEach(() => {
    wandb.server.mode = 'ok';
    wandb.server.failNextStreamPosts = 0;
  });

  it('creates a run named, grouped and tagged from method/backbone/dataset, with the full config, every history row and the summary', async () => {
    const { runDir, printed, run: training } = await trainWithWandb({}, { env: wandb.env });
    assert.deepEqual(printed, [], 'no warning');
    const info = readWandbRunInfo(runDir);
    assert.ok(info, 'wandb.json written');
    assert.equal(info.state, 'synced');
    assert.equal(info.entity, wandb.server.entity, 'the default entity of the API key');
    const run = wandb.server.run(info.id);
    assert.equal(run.project, 'ssl-zoo-synthetic');
    assert.equal(run.entity, wandb.server.entity);
    assert.equal(run.displayName, 'simclr-mlp-synthetic-seed0');
    assert.equal(run.groupName, 'simclr-mlp-synthetic');
    assert.equal(run.jobType, 'pretrain');
    assert.deepEqual(run.tags, ['simclr', 'mlp', 'synthetic']);
    assert.ok(info.url?.includes(`/${wandb.server.entity}/ssl-zoo-synthetic/runs/${info.id}`), `url ${info.url}`);

    // The full resolved config, in W&B's {key: {value}} form.
    const config = run.config as Record<string, { value: unknown }>;
    const local = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.deepEqual(Object.keys(config).sort(), Object.keys(local).sort(), 'every config key');
    assert.equal(config.method.value, 'simclr');
    assert.equal(config.backbone.value, 'mlp');
    assert.equal(config.globalBatch.value, 32);
    assert.equal(config.worldSize.value, 1);
    assert.deepEqual((config.methodArgs.value as Record<string, number>).projHiddenDim, 32);
    assert.equal(typeof config.packageVersion.value, 'string');

    // One history row per logged step: training metrics, and at epoch ends validation too.
    const rows = localHistory(runDir);
    assert.deepEqual(
      rows.map((r) => r.step),
      [2, 4, 6, 8, 10, 12, 14, 16],
    );
    assertHistoryDelivered(run, rows);
    for (const line of run.history) {
      for (const key of ['train/loss', 'train/lr', 'train/images_per_sec', 'train/acc1', 'train/embedding_std', 'epoch', '_runtime', '_timestamp']) {
        assert.ok(key in line, `history line at step ${line._step} has ${key}`);
      }
    }
    const epochEnds = run.history.filter((l) => 'val/knn_acc1' in l);
    assert.deepEqual(
      epochEnds.map((l) => l._step),
      [8, 16],
      'validation rows at the epoch-end steps',
    );
    for (const l of epochEnds) for (const key of ['val/knn_acc1', 'val/knn_acc5', 'val/acc1', 'val/acc5']) assert.equal(typeof l[key], 'number', key);
    assert.ok(
      Object.keys(run.history[0]).every((k) => /^(train\/|val\/|epoch$|_)/.test(k)),
      `consistent names: ${Object.keys(run.history[0]).join(', ')}`,
    );

    // Summary: final validation, wall time, best accuracies; the run is complete with exit code 0.
    assert.equal(run.complete, true);
    assert.equal(run.exitcode, 0);
    const summary = run.summaryMetrics as Record<string, number>;
    assert.equal(summary['val/knn_acc1'], training.fit.validation['val/knn_acc1']);
    assert.equal(summary.step, 16);
    assert.equal(typeof summary.wall_time_sec, 'number');
    assert.equal(summary['val/knn_acc1_best'], Math.max(...epochEnds.map((l) => l['val/knn_acc1'] as number)));
  });

  it('a resumed run keeps its W&B id and ends with the whole history', async () => {
    const first = await trainWithWandb({ maxSteps: 10 }, { env: wandb.env });
    const id = readWandbRunInfo(first.runDir)?.id;
    assert.ok(id);
    assert.deepEqual(
      wandb.server.run(id).history.map((l) => l._step),
      [2, 4, 6, 8, 10],
    );
    // The first part of the history is lost on the server (as after a failed upload)...
    wandb.server.run(id).history.length = 0;
    const second = await trainWithWandb({ resume: 'auto' }, { env: wandb.env }, first.runDir);
    assert.deepEqual(second.printed, []);
    assert.equal(readWandbRunInfo(first.runDir)?.id, id, 'same id in wandb.json');
    const run = wandb.server.run(id);
    assert.equal([...wandb.server.runs.values()].filter((r) => r.id === id).length, 1);
    assert.ok(run.upserts.filter((u) => u.config !== undefined).length >= 2, 'the run was upserted again on resume');
    // ... and the resumed run re-sent it ahead of the new rows.
    const rows = localHistory(first.runDir);
    assert.deepEqual(
      rows.map((r) => r.step),
      [2, 4, 6, 8, 10, 12, 14, 16],
    );
    assertHistoryDelivered(run, rows);
    assert.equal(run.exitcode, 0);
  });

  it('re-sends file_stream posts that fail transiently: nothing is lost', async () => {
    wandb.server.failNextStreamPosts = 2;
    const { runDir, printed } = await trainWithWandb({}, { env: wandb.env, retryDelaysMs: [100, 200, 400] });
    assert.deepEqual(printed, []);
    const info = readWandbRunInfo(runDir);
    assert.equal(info?.state, 'synced');
    assert.ok(
      wandb.server.requests.some((r) => r.path.endsWith('/file_stream') && r.status === 503),
      'the server did fail',
    );
    assertHistoryDelivered(wandb.server.run(info.id), localHistory(runDir));
  });

  for (const [what, setUp] of [
    ['the server is down', async (): Promise<NodeJS.ProcessEnv> => ({ ...wandb.env, WANDB_BASE_URL: `http://127.0.0.1:${await closedPort()}` })],
    ['the server answers HTTP 500', async (): Promise<NodeJS.ProcessEnv> => ((wandb.server.mode = 'error'), wandb.env)],
    ['the server never answers', async (): Promise<NodeJS.ProcessEnv> => ((wandb.server.mode = 'stall'), wandb.env)],
    ['there is no API key', async (): Promise<NodeJS.ProcessEnv> => ({ ...wandb.env, WANDB_API_KEY: undefined })],
  ] as const) {
    it(`when ${what}, training completes, one warning says so and the run directory holds every metric`, async () => {
      const before = wandb.server.requests.length;
      const started = Date.now();
      const { runDir, printed } = await trainWithWandb({}, { env: await setUp(), finishTimeoutMs: 3000 });
      const elapsed = (Date.now() - started) / 1000;
      assertLocalRunComplete(runDir);
      assert.equal(printed.length, 1, `one warning, got: ${printed.join(' | ')}`);
      assert.match(printed[0], /^warning: W&B: .*training goes on and every metric stays in .*wandb-sync/);
      const info = readWandbRunInfo(runDir);
      assert.equal(info?.state, 'unsynced');
      assert.ok(info?.lastError, 'the reason is recorded');
      assert.ok(elapsed < 120, `bounded: ${elapsed} s`);
      if (what === 'there is no API key') assert.equal(wandb.server.requests.length, before, 'no request without a key');
      if (what === 'the server answers HTTP 500') assert.ok(wandb.server.requests.slice(before).every((r) => r.status === 500));
    });
  }

  it('an upload cut short by file_stream errors is completed by wandb-sync (same run, whole history)', async () => {
    wandb.server.mode = 'stream-error';
    const { runDir, printed } = await trainWithWandb({}, { env: wandb.env });
    assert.equal(printed.length, 1);
    const info = readWandbRunInfo(runDir);
    assert.equal(info?.state, 'unsynced');
    assert.equal(wandb.server.run(info.id).history.length, 0);
    wandb.server.mode = 'ok';
    const [result] = await wandbSync([runDir], { env: wandb.env, retryDelaysMs: [50] });
    assert.equal(result.ok, true, result.problems.join('; '));
    assert.equal(result.id, info.id);
    assert.equal(readWandbRunInfo(runDir)?.state, 'synced');
    const run = wandb.server.run(info.id);
    assertHistoryDelivered(run, localHistory(runDir));
    assert.equal(run.groupName, 'simclr-mlp-synthetic');
    assert.equal(run.exitcode, 0);
  });
});

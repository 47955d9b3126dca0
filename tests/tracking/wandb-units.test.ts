import { strict as assert } from 'node:assert';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../src/core/errors.js';
import { deriveWandbIdentity, resolveWandbMode, wandbApiKeyAvailable } from '../../src/tracking/identity.js';
import { WandbLogger } from '../../src/tracking/logger.js';
import { summarizeHistory } from '../../src/tracking/uploader.js';
import { historyRows, parseMetricsJsonl } from '../../src/trainer/run-dir.js';
import { tempDir } from '../helpers/run.js';

describe('W&B logger pieces', () => {
  it('mode: the flag, else WANDB_MODE (offline/dryrun, disabled, online/run), else online; anything else is a user error', () => {
    assert.equal(resolveWandbMode(undefined, {}), 'online');
    assert.equal(resolveWandbMode(undefined, { WANDB_MODE: 'dryrun' }), 'offline');
    assert.equal(resolveWandbMode(undefined, { WANDB_MODE: 'Offline' }), 'offline');
    assert.equal(resolveWandbMode(undefined, { WANDB_MODE: 'disabled' }), 'disabled');
    assert.equal(resolveWandbMode(undefined, { WANDB_MODE: 'run' }), 'online');
    assert.equal(resolveWandbMode('online', { WANDB_MODE: 'offline' }), 'online');
    assert.throws(() => resolveWandbMode(undefined, { WANDB_MODE: 'later' }), UserError);
  });

  it('identity: flags over WANDB_* over values derived from method, backbone and dataset', () => {
    const config = { method: 'byol', backbone: 'resnet18', dataset: 'cifar10', seed: 3 };
    assert.deepEqual(deriveWandbIdentity(config, {}, {}), {
      project: 'ssl-zoo-cifar10',
      entity: undefined,
      name: 'byol-resnet18-cifar10-seed3',
      group: 'byol-resnet18-cifar10',
      tags: ['byol', 'resnet18', 'cifar10'],
      jobType: 'pretrain',
    });
    const env = { WANDB_PROJECT: 'p', WANDB_ENTITY: 'e', WANDB_NAME: 'n', WANDB_RUN_GROUP: 'g', WANDB_TAGS: 'x, y' };
    const fromEnv = deriveWandbIdentity(config, {}, env);
    assert.deepEqual(
      [fromEnv.project, fromEnv.entity, fromEnv.name, fromEnv.group, fromEnv.tags],
      ['p', 'e', 'n', 'g', ['byol', 'resnet18', 'cifar10', 'x', 'y']],
    );
    const fromFlags = deriveWandbIdentity(config, { project: 'P', entity: 'E', group: 'G', tags: ['byol', 'z'] }, env);
    assert.deepEqual([fromFlags.project, fromFlags.entity, fromFlags.group, fromFlags.tags], ['P', 'E', 'G', ['byol', 'resnet18', 'cifar10', 'z']]);
  });

  it('history: one row per step, training and validation merged, later records win, in step order', () => {
    const text = [
      '{"step": 2, "time": 1, "train/loss": 5, "epoch": 0}',
      '{"step": 4, "time": 2, "train/loss": 4, "epoch": 0}',
      '{"step": 4, "time": 3, "val/knn_acc1": 0.25, "epoch": 0}',
      '{"step": 6, "time": 4, "train/loss": null, "epoch": 1}',
      '',
      '{"step": 6, "time": 5, "train/loss": 3.5, "epoch": 1}',
    ].join('\n');
    const records = parseMetricsJsonl(text, 'metrics.jsonl');
    assert.equal(records.length, 5);
    assert.ok(Number.isNaN(records[3].values['train/loss']), 'null reads as NaN');
    assert.deepEqual(historyRows(records), [
      { step: 2, values: { 'train/loss': 5, epoch: 0 } },
      { step: 4, values: { 'train/loss': 4, 'val/knn_acc1': 0.25, epoch: 0 } },
      { step: 6, values: { 'train/loss': 3.5, epoch: 1 } },
    ]);
    const summary = summarizeHistory(historyRows(records), { wall_time_sec: 9 });
    assert.deepEqual(summary, { 'train/loss': 3.5, epoch: 1, 'val/knn_acc1': 0.25, _step: 6, 'val/knn_acc1_best': 0.25, wall_time_sec: 9 });
  });

  it('a malformed metrics line is a user error naming file and line', () => {
    assert.throws(() => parseMetricsJsonl('{"step": 1}\n[1]\n', 'm.jsonl'), /m\.jsonl:2: not a JSON object/);
    assert.throws(() => parseMetricsJsonl('{"step": -1}\n', 'm.jsonl'), /m\.jsonl:1: "step" must be an integer >= 0, got -1/);
  });

  it('API key: WANDB_API_KEY, or a password for the server host in .netrc', () => {
    const home = tempDir();
    assert.equal(wandbApiKeyAvailable({ HOME: home }, 'https://api.wandb.ai'), false);
    assert.equal(wandbApiKeyAvailable({ HOME: home, WANDB_API_KEY: 'k' }, 'https://api.wandb.ai'), true);
    writeFileSync(join(home, '.netrc'), 'machine other.host\n  login user\n  password a\nmachine api.wandb.ai\n  login user\n  password secret\n');
    assert.equal(wandbApiKeyAvailable({ HOME: home }, 'https://api.wandb.ai'), true);
    assert.equal(wandbApiKeyAvailable({ HOME: home }, 'http://127.0.0.1:8080'), false);
  });

  it('disabled mode logs nothing and writes no wandb.json', async () => {
    const runDir = tempDir();
    const logger = new WandbLogger({ runDir, env: { WANDB_MODE: 'disabled' }, print: () => assert.fail('nothing to print') });
    logger.logHyperparams({ method: 'simclr' });
    logger.logMetrics({ 'train/loss': 1 }, 1);
    await logger.finalize('success', {});
    assert.equal(existsSync(join(runDir, 'wandb.json')), false);
    assert.equal(logger.runInfo, undefined);
  });
});

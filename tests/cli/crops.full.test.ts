import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI, runCli, tempDir } from '../helpers/run.js';

/** Preloading this registers the `multicrop_simclr` test method (see tests/methods/multicrop-method.ts). */
const MULTICROP_METHOD = fileURLToPath(new URL('../methods/multicrop-method.js', import.meta.url));

/** One training step of tiny_resnet on 16 px synthetic images with small heads. */
const ONE_STEP = [
  ...['--dataset', 'synthetic', '--image-size', '16', '--synthetic-size', '128', '--backbone', 'tiny_resnet', '--batch-size', '16'],
  ...['--workers', '1', '--max-steps', '1', '--val-every', '0', '--method-arg', 'projHiddenDim=16', '--method-arg', 'projOutputDim=8'],
];

function resolvedCrops(runDir: string): unknown {
  return (JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>).crops;
}

function lastLoss(runDir: string): number {
  const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  return (JSON.parse(rows[rows.length - 1]) as Record<string, number>)['train/loss'];
}

describe('ssl-train --crops', function () {
  this.timeout(120_000);
  const dir = tempDir();

  it("records the method's default crops, and a YAML config's crops given as the flag's text or as a list", () => {
    const text = join(dir, 'text.yaml');
    writeFileSync(text, "crops: '2x12:0.3-1'\n");
    const list = join(dir, 'list.yaml');
    writeFileSync(list, 'crops:\n  - count: 2\n    size: 12\n    scale: [0.3, 1]\n');
    for (const [config, expected] of [
      [undefined, '2x16:0.2-1'],
      [text, '2x12:0.3-1'],
      [list, '2x12:0.3-1'],
    ] as const) {
      const runDir = join(dir, `run-${expected}-${config ? 'config' : 'default'}-${Math.random()}`);
      const { status, stderr } = runCli([...ONE_STEP, '--run-dir', runDir, ...(config ? ['--config', config] : [])]);
      assert.equal(status, 0, stderr);
      assert.equal(resolvedCrops(runDir), expected);
      assert.ok(Number.isFinite(lastLoss(runDir)));
    }
  });

  it('a multi-crop method trains on its default local crops (round(16 * 96/224) = 7 px) and on the crops given', () => {
    for (const [crops, expected] of [
      [[], '2x16:0.2-1,4x7:0.05-0.14'],
      [['--crops', '2x14:0.3-1,3x8:0.05-0.3,2x6:0.05-0.1'], '2x14:0.3-1,3x8:0.05-0.3,2x6:0.05-0.1'],
    ] as const) {
      const runDir = join(dir, `multicrop-${crops.length}`);
      const r = spawnSync(process.execPath, ['--import', MULTICROP_METHOD, CLI, ...ONE_STEP, '--method', 'multicrop_simclr', '--run-dir', runDir, ...crops], {
        encoding: 'utf8',
        timeout: 120_000,
        env: { ...process.env, FORCE_COLOR: '0' },
      });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(resolvedCrops(runDir), expected);
      assert.ok(Number.isFinite(lastLoss(runDir)));
    }
  });
});

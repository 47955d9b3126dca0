import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CLI } from '../helpers/run.js';

/** Preloading this registers the `multicrop_simclr` test method (see tests/methods/multicrop-method.ts). */
const MULTICROP_METHOD = fileURLToPath(new URL('../methods/multicrop-method.js', import.meta.url));

describe('multi-crop data-parallel training equals one process', function () {
  this.timeout(300_000);

  const args = [
    ...['verify', '--method', 'multicrop_simclr', '--backbone', 'tiny_resnet', '--dataset', 'synthetic', '--image-size', '16'],
    ...['--synthetic-size', '192', '--workers', '0', '--batch-size', '24', '--devices', '2'],
    ...['--crops', '2x16:0.2-1,3x8:0.05-0.3,2x6:0.05-0.2', '--method-arg', 'projHiddenDim=16', '--method-arg', 'projOutputDim=8'],
  ];
  const verify = (extra: string[] = []) =>
    spawnSync(process.execPath, ['--import', MULTICROP_METHOD, CLI, ...args, ...extra], {
      encoding: 'utf8',
      timeout: 280_000,
      env: { ...process.env, FORCE_COLOR: '0' },
    });

  it('verify --devices 2: 2 global + 3 and 2 local crops of other sizes, forwarded per size with SyncBatchNorm (different samples per rank)', () => {
    const r = verify();
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
  });

  it('the same check fails with per-rank batch statistics (--sync-batchnorm false): the size groups are compared', () => {
    const r = verify(['--sync-batchnorm', 'false']);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
  });
});

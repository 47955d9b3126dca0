import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CLI } from '../helpers/run.js';
import { SMALL_RUN } from './helpers.js';

/** Preloading this registers the negative-control methods (see tests/methods/regs-methods.ts). */
const REGS_METHODS = fileURLToPath(new URL('../methods/regs-methods.js', import.meta.url));

/**
 * `ssl-train verify` for W-MSE and VIbCReg on 2 and 3 real ranks over Gloo (each rank its own samples,
 * global batch 24): loss, gradients, parameters and buffers (the loss-call counter included)
 * over 3 steps equal one process on the global batch; and the same check fails when each
 * rank whitens its own batch (`wmse_local`), or when VIbCReg's IterNorm keeps per-rank
 * statistics (`--sync-batchnorm false` with `--norm layer`, which leaves IterNorm the only
 * layer coupling the samples). The small setting of training.test.ts: mlp
 * backbone (batch norm everywhere, SyncBatchNorm), synthetic 16x16 data, small heads.
 */
function verify(args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, ['--import', REGS_METHODS, CLI, 'verify', ...SMALL_RUN, '--batch-size', '24', '--steps', '3', ...args], {
    encoding: 'utf8',
    timeout: 280_000,
    env: { ...process.env, FORCE_COLOR: '0' },
  });
}

const stepRows = (stdout: string) =>
  stdout
    .trim()
    .split('\n')
    .filter((l) => /^\d+\s/.test(l)).length;

/** D = 6, sub-batches of 12 rows (two per view, each mixing the ranks' rows), two whitening iterations. */
const WMSE_ARGS = [
  '--method-arg',
  'projHiddenDim=32',
  '--method-arg',
  'projOutputDim=6',
  '--method-arg',
  'whiteningSize=12',
  '--method-arg',
  'whiteningIters=2',
];

describe('wmse: data-parallel training equals one process on the global batch', function () {
  this.timeout(300_000);

  for (const devices of [2, 3]) {
    it(`ssl-train verify --devices ${devices} passes (whitened sub-batches mix every rank's rows)`, () => {
      const r = verify(['--method', 'wmse', ...WMSE_ARGS, '--devices', String(devices)]);
      assert.equal(r.status, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
      assert.equal(stepRows(r.stdout), 3);
    });
  }

  it('a whitening size that does not divide the global batch (10 of 24): sub-batches of 8, said once, and still exact on 3 ranks', () => {
    const r = verify(['--method', 'wmse', ...WMSE_ARGS, '--method-arg', 'whiteningSize=10', '--devices', '3']);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /PASSED/);
    const said = (r.stdout + r.stderr)
      .split('\n')
      .filter((l) => l.includes("ssl-train: note: wmse's whitening size 10 does not divide the global batch of 24; whitening sub-batches of 8 rows instead"));
    // Once by rank 0 (for its W-rank method, the one-process reference and the twins alike), never by ranks 1 and 2.
    assert.equal(said.length, 1, r.stderr);
  });

  it("negative control: whitening each rank's batch on its own (wmse_local) fails the same check", () => {
    const r = verify(['--method', 'wmse_local', ...WMSE_ARGS, '--devices', '2']);
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(r.stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
  });
});

/** A projector 32-32-16 ending with IterNorm in 4 groups of 4. */
const VIBCREG_ARGS = ['--method', 'vibcreg', '--method-arg', 'projHiddenDim=32', '--method-arg', 'projOutputDim=16', '--method-arg', 'iternormGroups=4'];

describe('vibcreg: data-parallel training equals one process on the global batch (SyncIterNorm)', function () {
  this.timeout(300_000);

  for (const devices of [2, 3]) {
    it(`ssl-train verify --devices ${devices} passes (IterNorm converted to SyncIterNorm with the batch norms)`, () => {
      const r = verify([...VIBCREG_ARGS, '--devices', String(devices)]);
      assert.equal(r.status, 0, r.stdout + r.stderr);
      assert.match(r.stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
      assert.equal(stepRows(r.stdout), 3);
    });
  }

  it('with per-sample norms elsewhere (--norm layer), IterNorm alone couples the samples: passes with SyncIterNorm, fails with per-rank statistics (--sync-batchnorm false)', () => {
    const synced = verify([...VIBCREG_ARGS, '--norm', 'layer', '--devices', '2']);
    assert.equal(synced.status, 0, synced.stdout + synced.stderr);
    assert.match(synced.stdout, /PASSED/);
    const local = verify([...VIBCREG_ARGS, '--norm', 'layer', '--sync-batchnorm', 'false', '--devices', '2']);
    assert.equal(local.status, 1, local.stdout + local.stderr);
    assert.match(local.stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
  });
});

import { strict as assert } from 'node:assert';
import { runCli } from '../helpers/run.js';

/**
 * `ssl-train verify` for MAE on 2 and 3 real Gloo processes, each rank with its own shard of
 * the global batch: each rank's loss, the gradients and the parameters over 3 steps equal one
 * process on the global batch. That needs the masks keyed by the global sample index (a
 * sample gets the same mask on any rank, see tests/methods/mae.test.ts) and the loss's masked
 * count all-reduced. vit_tiny on synthetic 16x16 images (4x4 patches, 4 kept), a small
 * decoder, global batch 12.
 */
const SMALL_MAE = [
  '--dataset',
  'synthetic',
  '--image-size',
  '16',
  '--synthetic-size',
  '192',
  '--workers',
  '0',
  '--val-every',
  '0',
  '--method',
  'mae',
  '--backbone',
  'vit_tiny',
  '--method-arg',
  'decoderEmbedDim=32',
  '--method-arg',
  'decoderDepth=1',
  '--method-arg',
  'decoderNumHeads=4',
];

describe('mae: data-parallel training equals one process on the global batch', function () {
  this.timeout(600_000);

  for (const devices of [2, 3]) {
    it(`ssl-train verify --devices ${devices} passes (loss, gradients and parameters over 3 steps)`, () => {
      const { status, stdout, stderr } = runCli(['verify', ...SMALL_MAE, '--devices', String(devices), '--batch-size', '12', '--steps', '3'], 540_000);
      assert.equal(status, 0, stdout + stderr);
      const verdict = /PASSED: the worst difference is [0-9.]+ of its bound/.exec(stdout);
      assert.ok(verdict, stdout);
      assert.equal(
        stdout
          .trim()
          .split('\n')
          .filter((l) => /^\d+\s/.test(l)).length,
        3,
      );
      console.log(`      ${verdict[0]}`);
    });
  }
});

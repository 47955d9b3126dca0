/**
 * The fast tier's smoke test of the zoo's exactness (every method's runs are in
 * zoo-exactness.full.test.ts): `ssl-train verify` for SimCLR on 2 real ranks over Gloo, each with
 * its own samples, on the smallest setting that still has synchronised batch norm and a gathered
 * loss (mlp on 8x8 synthetic images, global batch 8, one step) passes.
 */
import { strict as assert } from 'node:assert';
import { runCli } from '../helpers/run.js';

const TINY = ['--backbone', 'mlp', '--dataset', 'synthetic', '--image-size', '8', '--synthetic-size', '16', '--workers', '0', '--val-every', '0'];
const HEADS = ['--method-arg', 'projHiddenDim=16', '--method-arg', 'projOutputDim=8'];

describe('zoo exactness smoke test: simclr on 2 ranks equals one process', function () {
  this.timeout(180_000);

  it('simclr: ssl-train verify --devices 2 passes (loss, gradients, parameters and buffers after one step)', () => {
    const { status, stdout, stderr } = runCli(
      ['verify', ...TINY, ...HEADS, '--method', 'simclr', '--devices', '2', '--batch-size', '8', '--steps', '1'],
      150_000,
    );
    assert.equal(status, 0, `simclr: verify exited ${status}\n${stdout}${stderr}`);
    assert.match(stdout, /^verify simclr: 2 rank\(s\) vs one process on the same global batch$/m);
    assert.match(stdout, /PASSED: the worst difference is [0-9.]+ of its bound/, `simclr: ${stdout}`);
  });
});

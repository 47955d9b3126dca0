/** `ssl-train export` refuses a Vision Transformer run with one line and exit code 2 (no export mapping yet). */
import { strict as assert } from 'node:assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, tempDir } from '../helpers/run.js';

describe('ssl-train export: Vision Transformer runs', function () {
  this.timeout(600_000);
  const root = tempDir('ssl-zoo-export-vit-');
  const run = join(root, 'run');

  before(() => {
    const train = runCli(
      [
        ...['--method', 'simclr', '--backbone', 'vit_tiny', '--dataset', 'synthetic', '--image-size', '16', '--synthetic-size', '64'],
        ...['--batch-size', '16', '--epochs', '1', '--max-steps', '1', '--workers', '0', '--val-every', '0'],
        ...['--method-arg', 'projHiddenDim=32', '--method-arg', 'projOutputDim=16', '--run-dir', run],
      ],
      300_000,
    );
    assert.equal(train.status, 0, train.stderr);
  });

  for (const format of ['tfjs', 'onnx']) {
    it(`--format ${format}: one clear line, exit 2, nothing written`, () => {
      const out = join(root, `out-${format}`);
      const r = runCli(['export', run, '--format', format, '--out', out]);
      const lines = r.stderr.split('\n').filter((l) => l.trim() !== '');
      assert.equal(r.status, 2, r.stderr);
      assert.equal(lines.length, 1, r.stderr);
      assert.match(
        lines[0]!,
        /^ssl-train: error: export: cannot export backbone: Vision Transformers \(vit_tiny, vit_small\) have no tfjs\/ONNX export mapping yet/,
      );
      assert.ok(!existsSync(out), `${out} must not be created`);
    });
  }
});

/**
 * `--grad-checkpointing`: MAE (a ViT encoder and a transformer decoder) trained two steps with
 * its blocks' activations recomputed ends in the same parameters, bit for bit, as without;
 * a model without transformer blocks is refused in one line.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { runCli, smallMaeDecoder, tempDir, TINY_DATA_FLAGS } from '../helpers/run.js';

const SMALL = [...TINY_DATA_FLAGS, '--val-every', '0'];
const SMALL_DECODER = smallMaeDecoder(2);

/** Trains MAE two steps; returns its stderr. */
function trainMae(runDir: string, checkpointing: boolean): string {
  const flags = [
    '--method',
    'mae',
    ...SMALL,
    ...SMALL_DECODER,
    '--max-steps',
    '2',
    ...(checkpointing ? ['--grad-checkpointing'] : ['--grad-checkpointing', 'false']),
    '--run-dir',
    runDir,
  ];
  const { status, stderr } = runCli(flags, 200_000);
  assert.equal(status, 0, stderr);
  return stderr;
}

describe('ssl-train --grad-checkpointing', function () {
  this.timeout(420_000);

  it('MAE after two steps with checkpointing equals MAE without, every parameter and buffer bit for bit', () => {
    const [plainDir, checkpointedDir] = [join(tempDir(), 'mae-plain'), join(tempDir(), 'mae-checkpointed')];
    assert.doesNotMatch(trainMae(plainDir, false), /grad-checkpointing/);
    // vit_tiny's 12 blocks and the decoder's 2.
    assert.match(trainMae(checkpointedDir, true), /--grad-checkpointing: 14 transformer blocks recompute their activations in the backward pass/);
    const config = JSON.parse(readFileSync(join(checkpointedDir, 'config.json'), 'utf8')) as { gradCheckpointing?: boolean };
    assert.equal(config.gradCheckpointing, true);
    const plain = loadCheckpoint(join(plainDir, 'checkpoints', 'last.ckpt')).tensors;
    const checkpointed = loadCheckpoint(join(checkpointedDir, 'checkpoints', 'last.ckpt')).tensors;
    assert.deepEqual(Object.keys(checkpointed).sort(), Object.keys(plain).sort());
    for (const [name, t] of Object.entries(plain)) assert.deepEqual(checkpointed[name]!.dataSync(), t.dataSync(), `${name} differs`);
  });

  it('is refused in one line for a model without transformer blocks', () => {
    const runDir = join(tempDir(), 'resnet-checkpointing');
    const { status, stderr } = runCli(
      ['--method', 'simclr', '--backbone', 'tiny_resnet', ...SMALL, '--max-steps', '1', '--grad-checkpointing', 'true', '--run-dir', runDir],
      60_000,
    );
    assert.notEqual(status, 0);
    assert.match(
      stderr,
      /--grad-checkpointing: true is not allowed; expected a model with transformer blocks \(a vit_\* backbone\), not method simclr on tiny_resnet/,
    );
    assert.equal(stderr.trim().split('\n').length, 1, stderr);
  });
});

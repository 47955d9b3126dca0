/**
 * A method's own default backbone applies whenever `--backbone` is not given (on the
 * command line or in the config file): `--method mae` trains `vit_tiny`, and an explicit
 * ResNet is refused.
 */
import { strict as assert } from 'node:assert';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, smallMaeDecoder, tempDir, TINY_DATA_FLAGS } from '../helpers/run.js';

const SMALL = [...TINY_DATA_FLAGS, '--max-steps', '1'];
const SMALL_DECODER = smallMaeDecoder();

function backboneOf(runDir: string): string {
  return (JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as { backbone: string }).backbone;
}

describe("ssl-train: the method's default backbone", function () {
  this.timeout(180_000);

  it('--method mae without --backbone trains vit_tiny', () => {
    const runDir = join(tempDir(), 'mae');
    const { status, stderr } = runCli(['--method', 'mae', ...SMALL, ...SMALL_DECODER, '--run-dir', runDir], 150_000);
    assert.equal(status, 0, stderr);
    assert.equal(backboneOf(runDir), 'vit_tiny');
  });

  it('a config file naming mae and no backbone trains vit_tiny', () => {
    const dir = tempDir();
    const file = join(dir, 'mae.yaml');
    writeFileSync(file, 'method: mae\n');
    const runDir = join(dir, 'run');
    const { status, stderr } = runCli(['--config', file, ...SMALL, ...SMALL_DECODER, '--run-dir', runDir], 150_000);
    assert.equal(status, 0, stderr);
    assert.equal(backboneOf(runDir), 'vit_tiny');
  });

  it('--method mae --backbone tiny_resnet is refused in one line', () => {
    const runDir = join(tempDir(), 'mae-resnet');
    const { status, stderr } = runCli(['--method', 'mae', '--backbone', 'tiny_resnet', ...SMALL, ...SMALL_DECODER, '--run-dir', runDir], 60_000);
    assert.equal(status, 2, stderr);
    assert.match(
      stderr.trim(),
      /^ssl-train: error: backbone: "TinyResNet" is not allowed; expected a Vision Transformer \(vit_tiny or vit_small\) for method mae$/,
    );
  });

  it('other methods keep tiny_resnet by default', () => {
    const runDir = join(tempDir(), 'simclr');
    const { status, stderr } = runCli(['--method', 'simclr', ...SMALL, '--run-dir', runDir], 60_000);
    assert.equal(status, 0, stderr);
    assert.equal(backboneOf(runDir), 'tiny_resnet');
  });
});

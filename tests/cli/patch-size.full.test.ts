/**
 * `--patch-size`: the ViT's patch side reaches the backbone (the patch-embedding kernel is
 * P x P), is kept in the run's config, and an offline evaluation of the run rebuilds the
 * same architecture from it.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

describe('ssl-train --patch-size', function () {
  this.timeout(240_000);
  const runDir = join(tempDir(), 'vit-p8');

  it('trains vit_tiny with 8 px patches (a 2 x 2 grid on 16 px images) and records it', () => {
    const { status, stderr } = runCli([...SMOKE_FLAGS, '--backbone', 'vit_tiny', '--patch-size', '8', '--max-steps', '2', '--run-dir', runDir], 200_000);
    assert.equal(status, 0, stderr);
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as { patchSize?: number };
    assert.equal(config.patchSize, 8);
    const { tensors } = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
    const kernel = Object.entries(tensors).find(([name]) => name.endsWith('patch_embed.proj.weight') || name.endsWith('patch_embed/proj/weight'));
    assert.ok(kernel, `a patch-embedding kernel among ${Object.keys(tensors).slice(0, 8).join(', ')}, ...`);
    assert.deepEqual(kernel[1].shape.slice(0, 2), [8, 8]);
    const pos = Object.entries(tensors).find(([name]) => /pos_embed$/.test(name));
    assert.ok(pos, 'a position embedding');
    assert.equal(pos[1].shape[1], 1 + 2 * 2, '[CLS] and a 2 x 2 grid');
  });

  it('knn of that run rebuilds the 8 px patches from its config', () => {
    const { status, stderr } = runCli(['knn', runDir, '--k', '5'], 120_000);
    assert.equal(status, 0, stderr);
  });
});

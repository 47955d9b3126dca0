import { strict as assert } from 'node:assert';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../../src/core/errors.js';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint, saveCheckpoint } from '../../src/trainer/checkpoint.js';
import { tempDir } from '../helpers/run.js';

describe('checkpoint files', () => {
  it('round-trip float32 and int32 tensors and metadata, leaving no temporary file', async () => {
    const dir = tempDir();
    const path = join(dir, 'a.ckpt');
    const a = tf.tensor2d([
      [1.5, -2],
      [3, 4e-8],
    ]);
    const b = tf.tensor1d([7, -1, 0], 'int32');
    await saveCheckpoint(path, { tensors: { 'model/a': a, 'optimizer/b': b }, meta: { step: 12, nested: { x: [1, 2] } } });
    assert.deepEqual(readdirSync(dir), ['a.ckpt']);
    const loaded = loadCheckpoint(path);
    assert.deepEqual(loaded.meta, { step: 12, nested: { x: [1, 2] } });
    assert.deepEqual(loaded.tensors['model/a'].shape, [2, 2]);
    assert.deepEqual(Array.from(loaded.tensors['model/a'].dataSync()), Array.from(a.dataSync()));
    assert.equal(loaded.tensors['optimizer/b'].dtype, 'int32');
    assert.deepEqual(Array.from(loaded.tensors['optimizer/b'].dataSync()), [7, -1, 0]);
    tf.dispose([a, b, ...Object.values(loaded.tensors)]);
  });

  it('rejects missing, foreign and truncated files with user errors', async () => {
    const dir = tempDir();
    assert.throws(
      () => loadCheckpoint(join(dir, 'none.ckpt')),
      (e: unknown) => e instanceof UserError && /does not exist/.test(e.message),
    );
    writeFileSync(join(dir, 'x.ckpt'), 'hello world, not a checkpoint');
    assert.throws(() => loadCheckpoint(join(dir, 'x.ckpt')), /not an ssl-zoo checkpoint/);
    const path = join(dir, 'big.ckpt');
    const t = tf.ones([100]);
    await saveCheckpoint(path, { tensors: { t }, meta: {} });
    const bytes = readFileSync(path);
    writeFileSync(path, bytes.subarray(0, bytes.length - 10));
    assert.throws(() => loadCheckpoint(path), /truncated/);
    assert.ok(existsSync(path));
    t.dispose();
  });
});

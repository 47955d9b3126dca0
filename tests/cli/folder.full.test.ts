import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadFashionMnist } from '../../src/data/index.js';
import { writeJpeg, writePngFolder } from '../helpers/image-folder.js';
import { runCli, SMALL_PROJECTOR, tempDir } from '../helpers/run.js';

/** Small, fast training flags for a folder of 28 px images. */
const FOLDER_FLAGS = ['--dataset', 'folder', '--image-size', '28', '--backbone', 'mlp', '--batch-size', '32', '--epochs', '1', ...SMALL_PROJECTOR];

const dir = tempDir();

/** The `ssl-train: error:` line of a run that must fail with exit 2 and nothing else on stderr. */
function userError(args: string[]): string {
  const r = runCli([...FOLDER_FLAGS, '--run-dir', join(dir, 'never'), ...args]);
  assert.equal(r.status, 2, r.stderr);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.ok(!existsSync(join(dir, 'never')), 'a failed run wrote its run directory');
  return lines[0];
}

describe('cli: --dataset folder', () => {
  before(async () => {
    await writePngFolder(loadFashionMnist('test'), join(dir, 'png'), 30);
  });

  it('trains 1 epoch on a folder of 300 PNG files with kNN and linear validation (workers)', () => {
    const runDir = join(dir, 'run');
    const r = runCli([...FOLDER_FLAGS, '--data-dir', join(dir, 'png'), '--val-fraction', '0.2', '--workers', '1', '--run-dir', runDir], 240_000);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(!r.stderr.includes('warning'), r.stderr);
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.deepEqual([config.trainSize, config.valSize, config.channels, config.imageSize], [240, 60, 1, 28]);
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    const val = rows.find((row) => 'val/knn_acc1' in row);
    assert.ok(val, 'no validation row');
    // 10 classes: chance is 0.1; a random MLP's kNN on Fashion-MNIST is far above it
    assert.ok(val['val/knn_acc1'] > 0.3 && val['val/knn_acc1'] <= 1, `kNN ${val['val/knn_acc1']}`);
  });

  it('a corrupt JPEG in the middle of a folder of photos: one warning, training goes on', async () => {
    const photos = join(dir, 'photos');
    for (const c of ['cat', 'dog']) {
      mkdirSync(join(photos, c), { recursive: true });
      for (let i = 0; i < 20; i++) await writeJpeg(join(photos, c, `${i}.jpg`), 40 + 7 * i, 90 - 3 * i, i);
    }
    writeFileSync(join(photos, 'dog', '10.jpg'), readFileSync(join(photos, 'dog', '10.jpg')).subarray(0, 400));
    const r = runCli([...FOLDER_FLAGS, '--data-dir', photos, '--batch-size', '8', '--workers', '1', '--run-dir', join(dir, 'photos-run')], 240_000);
    assert.equal(r.status, 0, r.stderr);
    const warnings = r.stderr.split('\n').filter((l) => l.includes('warning'));
    assert.equal(warnings.length, 1, r.stderr);
    assert.match(warnings[0], /^ssl-train: warning: skipping .*dog\/10\.jpg: .*\(unreadable files so far: 1\)$/);
  });

  it('--unlabelled: a flat folder, one note that validation is off, no validation metrics', () => {
    const flat = join(dir, 'flat');
    mkdirSync(flat);
    const r0 = runCli(['--help']);
    assert.match(r0.stdout, /--unlabelled \[bool\]/);
    for (let i = 0; i < 3; i++) writeFileSync(join(flat, `x${i}.txt`), 'not an image');
    const png = join(dir, 'png');
    const files = ['Bag', 'Coat'].flatMap((c) => Array.from({ length: 20 }, (_, i) => join(png, c, readdirSync(join(png, c)).sort()[i])));
    files.forEach((f, i) => writeFileSync(join(flat, `${i}.png`), readFileSync(f)));
    const runDir = join(dir, 'flat-run');
    const r = runCli([...FOLDER_FLAGS, '--data-dir', flat, '--unlabelled', '--workers', '0', '--run-dir', runDir]);
    assert.equal(r.status, 0, r.stderr);
    const lines = r.stderr.trim().split('\n');
    assert.deepEqual(
      lines.filter((l) => l.includes('note')),
      ['ssl-train: note: --dataset folder --unlabelled has no labels: kNN and linear validation are off'],
    );
    assert.equal(lines.filter((l) => l.includes('warning: skipping')).length, 3);
    assert.ok(!readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').includes('val/'));
  });

  it('bad input: one line, exit 2, no run directory', () => {
    mkdirSync(join(dir, 'empty'));
    mkdirSync(join(dir, 'text', 'a'), { recursive: true });
    writeFileSync(join(dir, 'text', 'a', 'notes.txt'), 'x');
    assert.match(userError(['--data-dir', join(dir, 'missing')]), /^ssl-train: error: --data-dir: folder .*missing does not exist$/);
    assert.match(userError(['--data-dir', join(dir, 'empty')]), /^ssl-train: error: --data-dir: no images in .*empty$/);
    assert.match(userError(['--data-dir', join(dir, 'text')]), /^ssl-train: error: --data-dir: no images in .*text; its 1 files are not images/);
    assert.match(userError([]), /^ssl-train: error: --data-dir: --dataset folder needs --data-dir DIR/);
    assert.match(
      userError(['--data-dir', join(dir, 'png'), '--unlabelled', '--method', 'supcon']),
      /^ssl-train: error: --method supcon needs labels; --dataset folder --unlabelled has none$/,
    );
    assert.match(
      userError(['--dataset', 'synthetic', '--unlabelled']),
      /^ssl-train: error: --unlabelled: true is not allowed; expected only with --dataset folder$/,
    );
    assert.match(userError(['--data-dir', join(dir, 'png'), '--channels', '2']), /^ssl-train: error: --channels: 2 is not allowed; expected .*one of 1, 3/);
  });
});

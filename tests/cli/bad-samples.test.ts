/**
 * Training images that become unreadable mid-run (deleted at the first metrics row by
 * tests/helpers/fault-preload.ts), in real processes, inline and with loader workers: up to
 * `--max-bad-samples` they are skipped with a warning and a count; one more stops the run
 * with one line, exit code 1, the last checkpoint kept; a vanished data folder is one line too.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { syntheticDataset } from '../../src/data/index.js';
import { faultEnv } from '../helpers/fault-preload.js';
import { writePngFolder } from '../helpers/image-folder.js';
import { checkpointProgress } from '../helpers/run-files.js';
import { runCli, SMALL_PROJECTOR, tempDir } from '../helpers/run.js';

/** Two epochs of 40 unlabelled 16 px images (5 batches each), a metrics row and a checkpoint every step. */
function folderRun(dataDir: string, runDir: string, workers: number, extra: string[] = []): string[] {
  return [
    ...['--dataset', 'folder', '--data-dir', dataDir, '--unlabelled', '--image-size', '16', '--backbone', 'mlp', '--batch-size', '8'],
    ...['--epochs', '2', '--log-every', '1', '--val-every', '0', '--checkpoint-every-steps', '1', '--workers', String(workers)],
    ...['--run-dir', runDir, ...SMALL_PROJECTOR, ...extra],
  ];
}

/** Runs `args` with `paths` removed when the first metrics row is written. */
function runRemoving(args: string[], paths: string[]) {
  return runCli(args, 120_000, faultEnv({ removeWhenWritten: { pattern: 'metrics\\.jsonl$', paths } }));
}

describe('bad samples mid-run (CLI)', function () {
  this.timeout(180_000);
  let dir: string;
  let dataDir: string;
  let files: string[];
  beforeEach(async () => {
    dir = tempDir('ssl-zoo-bad-samples-');
    dataDir = join(dir, 'images');
    await writePngFolder(syntheticDataset({ split: 'train', seed: 3, size: 200, imageSize: 16 }), dataDir, 10, 4);
    files = readdirSync(dataDir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name))
      .sort();
    assert.equal(files.length, 40);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  for (const workers of [0, 2]) {
    it(`within --max-bad-samples the deleted images are skipped with a count and training finishes (--workers ${workers})`, () => {
      const deleted = [files[3], files[17], files[30]];
      const out = runRemoving(folderRun(dataDir, join(dir, 'run'), workers, ['--max-bad-samples', '3']), deleted);
      assert.equal(out.status, 0, out.stderr);
      const warnings = out.stderr.split('\n').filter((l) => l.startsWith('ssl-train: warning: skipping '));
      assert.deepEqual(warnings.map((l) => l.split(' ')[3].replace(/:$/, '')).sort(), deleted);
      assert.match(out.stderr, /\(unreadable files so far: 3\)/);
    });

    it(`one more than --max-bad-samples stops the run: one line, exit 1, the checkpoint kept (--workers ${workers})`, () => {
      const runDir = join(dir, 'run');
      const out = runRemoving(folderRun(dataDir, runDir, workers, ['--max-bad-samples', '2']), [files[3], files[17], files[30]]);
      assert.equal(out.status, 1, out.stderr);
      assert.doesNotMatch(out.stderr, /^\s+at |internal error/m, out.stderr);
      const errors = out.stderr.split('\n').filter((l) => l.startsWith('ssl-train: error:'));
      assert.equal(errors.length, 1, out.stderr);
      const match =
        /^ssl-train: error: 3 training images are unreadable, more than --max-bad-samples allows \(2\); the last: .*\.png: .*; the last good checkpoint is (.*last\.ckpt) \(step (\d+)\)$/.exec(
          errors[0],
        );
      assert.ok(match, errors[0]);
      assert.equal(checkpointProgress(match[1])?.step, Number(match[2]));
    });

    it(`a data folder that vanishes mid-run: one line, exit 1 (--workers ${workers})`, () => {
      const out = runRemoving(folderRun(dataDir, join(dir, 'run'), workers, ['--max-bad-samples', '100%']), [dataDir]);
      assert.equal(out.status, 1, out.stderr);
      assert.doesNotMatch(out.stderr, /^\s+at |internal error/m, out.stderr);
      assert.match(out.stderr, new RegExp(`^ssl-train: error: the data folder ${dataDir}/[^ ]+ no longer exists .*; the last good checkpoint is`, 'm'));
    });
  }

  it('the default --max-bad-samples is 1% of the training set, rounded up (1 of 40 images)', () => {
    const out = runRemoving(folderRun(dataDir, join(dir, 'run'), 0), [files[5], files[25]]);
    assert.equal(out.status, 1, out.stderr);
    assert.match(out.stderr, /^ssl-train: error: 2 training images are unreadable, more than --max-bad-samples allows \(1\)/m);
    const percent = runRemoving(folderRun(dataDir, join(dir, 'run2'), 0, ['--max-bad-samples', '5%']), [files[5], files[25]]);
    assert.equal(percent.status, 0, percent.stderr);
  });

  it('--max-bad-samples that is neither a count nor a percentage is a one-line user error', () => {
    const out = runCli(folderRun(dataDir, join(dir, 'run'), 0, ['--max-bad-samples', 'lots']));
    assert.equal(out.status, 2, out.stderr);
    assert.match(out.stderr, /^ssl-train: error: --max-bad-samples: "lots" is not allowed; expected an integer >= 0 .* or a percentage/m);
  });
});

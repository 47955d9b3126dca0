/**
 * `--max-bad-samples` on two ranks, in real processes: whichever rank meets one unreadable
 * image too many (deleted at the first metrics row by tests/helpers/fault-preload.ts), the
 * job ends with exit code 1 and that rank's one line (no hang, no stack trace of the rank
 * whose collective failed with it).
 */
import { strict as assert } from 'node:assert';
import { copyFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { syntheticDataset } from '../../src/data/index.js';
import { faultEnv } from '../helpers/fault-preload.js';
import { writePngFolder } from '../helpers/image-folder.js';
import { runCli, SMALL_PROJECTOR, tempDir } from '../helpers/run.js';

describe('bad samples on two ranks', function () {
  this.timeout(300_000);
  let dir: string;
  let dataDir: string;
  let files: string[];
  before(async () => {
    dir = tempDir('ssl-zoo-bad-samples-ranks-');
    dataDir = join(dir, 'images');
    await writePngFolder(syntheticDataset({ split: 'train', seed: 3, size: 200, imageSize: 16 }), dataDir, 10, 4);
    files = readdirSync(dataDir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name))
      .sort();
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the rank that meets an unreadable image over the limit stops the job: one line, exit 1', () => {
    const failedRanks = new Set<string>();
    // Files 0 and 1 of the folder: with this seed, one is read by rank 0 and the other by rank 1.
    for (const [i, file] of files.slice(0, 2).entries()) {
      const args = [
        ...['--dataset', 'folder', '--data-dir', dataDir, '--unlabelled', '--image-size', '16', '--backbone', 'mlp', '--batch-size', '8'],
        ...[
          '--epochs',
          '2',
          '--log-every',
          '1',
          '--val-every',
          '0',
          '--workers',
          '0',
          '--devices',
          '2',
          '--max-bad-samples',
          '0',
          '--checkpoint-every-steps',
          '1',
        ],
        ...['--run-dir', join(dir, `run-${i}`), ...SMALL_PROJECTOR],
      ];
      const kept = join(dir, 'kept.png');
      copyFileSync(file, kept);
      const out = runCli(args, 120_000, faultEnv({ removeWhenWritten: { pattern: 'metrics\\.jsonl$', paths: [file] } }));
      assert.equal(out.status, 1, out.stderr);
      assert.doesNotMatch(out.stderr, /^\s+at |internal error/m, out.stderr);
      const lines = out.stderr.split('\n').filter((l) => /^ssl-train: (error|rank \d+ failed)/.test(l));
      assert.equal(lines.length, 1, out.stderr);
      assert.match(lines[0], /1 training images are unreadable, more than --max-bad-samples allows \(0\); the last: .*; the last good checkpoint is/);
      failedRanks.add(/^ssl-train: rank (\d+) failed/.exec(lines[0])?.[1] ?? '0');
      copyFileSync(kept, file); // the next run reads the same folder
    }
    assert.deepEqual([...failedRanks].sort(), ['0', '1'], 'both a failure of rank 0 and one of rank 1 were tried');
  });
});

import { strict as assert } from 'node:assert';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { CLI, SMALL_PROJECTOR, tempDir } from '../helpers/run.js';
import { runProcess, SMALL_RUN } from './helpers.js';

const SMALL = [...SMALL_RUN, ...SMALL_PROJECTOR, '--batch-size', '16', '--max-steps', '2', '--epochs', '1'];

describe('the run directory', function () {
  this.timeout(180_000);

  it('only rank 0 creates it: two ranks in different working directories (nodes without a shared file system), default --run-dir', async () => {
    const store = tempDir('ssl-zoo-store-');
    const cwds = [tempDir('ssl-zoo-node0-'), tempDir('ssl-zoo-node1-')];
    const outcomes = await Promise.all(
      cwds.map((cwd, rank) =>
        runProcess([CLI, ...SMALL], {
          killAfterMs: 150_000,
          rank,
          cwd,
          env: { RANK: String(rank), WORLD_SIZE: '2', LOCAL_RANK: '0', LOCAL_WORLD_SIZE: '1', SSL_ZOO_RENDEZVOUS: `file://${store}`, SSL_ZOO_NUM_THREADS: '1' },
        }),
      ),
    );
    for (const o of outcomes) assert.equal(o.code, 0, `rank ${o.rank}: ${o.stderr}`);
    const runs = readdirSync(join(cwds[0], 'runs'));
    assert.equal(runs.length, 1, `rank 0 made one run directory: ${runs.join(', ')}`);
    for (const file of ['config.json', 'metrics.jsonl', 'summary.json', join('checkpoints', 'last.ckpt')]) {
      assert.ok(existsSync(join(cwds[0], 'runs', runs[0], file)), file);
    }
    assert.deepEqual(readdirSync(cwds[1]), [], 'rank 1 created nothing');
  });
});

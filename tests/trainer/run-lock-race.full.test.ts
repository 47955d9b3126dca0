/**
 * Several processes take over the same stale run-directory lock at once (src/trainer/run-lock.ts):
 * exactly one wins, the others are refused naming it. Two takers interleaved step by step, which
 * catches a naive takeover deterministically: run-lock.test.ts.
 */
import { strict as assert } from 'node:assert';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runLockPath } from '../../src/trainer/run-lock.js';
import { deadPid, writeLock } from '../helpers/run-lock.js';
import { tempDir } from '../helpers/run.js';

const TAKER = fileURLToPath(new URL('./run-lock-taker.js', import.meta.url));

describe('run directory lock: a race of processes', () => {
  it('lets exactly one of several processes take over the same stale lock at once', async function () {
    this.timeout(60_000);
    const TAKERS = 4;
    for (let round = 0; round < 2; round++) {
      const dir = tempDir();
      writeLock(dir, deadPid());
      const startAt = Date.now() + 1500; // after every taker has loaded its modules
      const outputs = await Promise.all(
        Array.from(
          { length: TAKERS },
          () =>
            new Promise<string>((resolve) => {
              const child = spawn(process.execPath, [TAKER, dir, String(startAt), '1500'], { stdio: ['ignore', 'pipe', 'inherit'] });
              let out = '';
              child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
              child.on('exit', () => resolve(out));
            }),
        ),
      );
      const results = outputs.map((o) => JSON.parse(o) as { won: boolean; warnings: string[]; error?: string });
      const winners = results.filter((r) => r.won);
      assert.equal(winners.length, 1, `round ${round}: ${outputs.join('')}`);
      // The winner says it took over the stale lock when it removed it itself (it may have
      // found it removed by a taker that then lost the race); a loser says nothing of it.
      assert.ok(winners[0].warnings.length <= 1);
      for (const loser of results.filter((r) => !r.won)) {
        assert.match(loser.error ?? '', /is in use by pid \d+ .*\(run-lock-taker\)/);
        assert.deepEqual(loser.warnings, []);
      }
      assert.equal(existsSync(runLockPath(dir)), false, 'the winner released it');
    }
  });
});

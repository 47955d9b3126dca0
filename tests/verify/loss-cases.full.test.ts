/**
 * `ssl-train verify --case FILE --devices W` on every case of the zoo (one file,
 * tests/fixtures/losses/cases.json: 31 losses, 34 cases) for W = 1, 2 and 3, one launch each:
 * every case passes, with its per-rank losses compared, and the report says so; a file with a
 * wrong per-rank reference fails at the W it was recorded for only, naming the case.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, tempDir } from '../helpers/run.js';
import { CASES_FILE } from '../losses/helpers.js';

describe('verify --case: every loss of the zoo on W = 1, 2, 3 (full tier)', function () {
  this.timeout(300_000);

  for (const W of [1, 2, 3]) {
    it(`W = ${W}: all 34 cases pass${W > 1 ? ', per-rank losses compared' : ''}`, () => {
      const started = Date.now();
      const { status, stdout, stderr } = runCli(['verify', '--case', CASES_FILE, '--devices', String(W)], 240_000);
      assert.equal(status, 0, stdout + stderr);
      const lines = stdout.trim().split('\n');
      assert.match(lines[0]!, new RegExp(`W = ${W} process`));
      assert.equal(lines.filter((l) => / passed .*per-rank loss error /.test(l)).length, W === 1 ? 0 : 34, stdout);
      assert.equal(lines.filter((l) => / passed /.test(l)).length, 34, stdout);
      assert.equal(lines.at(-1), 'PASSED: 34 passed, 0 failed, 0 skipped');
      console.log(`      W = ${W}: ${lines.at(-1)} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    });
  }

  it('a wrong per-rank reference for W = 3 fails at W = 3, naming the case', () => {
    const f = JSON.parse(readFileSync(CASES_FILE, 'utf8')) as { cases: Array<{ name: string; expected: { per_rank: Record<string, number[]> } }> };
    f.cases.find((c) => c.name === 'nnclr')!.expected.per_rank['3']![2]! *= 1.01;
    const path = join(tempDir('ssl-zoo-case-'), 'edited.json');
    writeFileSync(path, JSON.stringify(f));
    const { status, stdout, stderr } = runCli(['verify', '--case', path, '--devices', '3'], 240_000);
    assert.equal(status, 1, stdout + stderr);
    assert.match(stdout, /^ {2}nnclr +failed .*per-rank loss error (9\.\de-3|1\.0e-2)/m);
    assert.match(stdout.trim().split('\n').at(-1)!, /^FAILED: 33 passed, 1 failed, 0 skipped$/);
  });
});

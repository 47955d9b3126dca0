import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../helpers/run.js';

const example = (name: string) => fileURLToPath(new URL(`../../examples/${name}`, import.meta.url));

function run(script: string, args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [example(script), ...args], { encoding: 'utf8', timeout: 180_000, env: { ...process.env, FORCE_COLOR: '0' } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// The "Your own method" example of docs/methods.md (examples/my-simclr.ts); examples/inject.ts,
// the "From code" one, runs in tests/e2e/extending.full.test.ts.
describe('the examples of docs/methods.md run as written', function () {
  this.timeout(240_000);

  it('your own method: examples/my-simclr.js trains my_simclr from the CLI and logs its own loss terms', () => {
    const runDir = join(tempDir(), 'run');
    const r = run('my-simclr.js', [
      '--method',
      'my_simclr',
      '--method-arg',
      'varianceWeight=0.5',
      '--max-steps',
      '4',
      '--backbone',
      'mlp',
      '--image-size',
      '16',
      '--synthetic-size',
      '128',
      '--batch-size',
      '32',
      '--workers',
      '0',
      '--val-every',
      '0',
      '--log-every',
      '1',
      '--run-dir',
      runDir,
    ]);
    assert.equal(r.status, 0, r.stderr);
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>);
    const steps = rows.filter((row) => row['train/loss'] !== undefined);
    assert.equal(steps.length, 4);
    for (const row of steps) {
      assert.ok(Number.isFinite(row['train/contrastive']) && Number.isFinite(row['train/variance']), JSON.stringify(row));
      // The logged loss is the method's: the contrastive term plus 0.5 x the variance term.
      assert.ok(
        Math.abs(row['train/loss'] - (row['train/contrastive'] + 0.5 * row['train/variance'])) < 1e-4 * Math.abs(row['train/loss']),
        JSON.stringify(row),
      );
    }
  });
});

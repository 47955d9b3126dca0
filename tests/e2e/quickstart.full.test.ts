import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCli, tempDir } from '../helpers/run.js';

const QUICKSTART = fileURLToPath(new URL('../../../configs/quickstart.yaml', import.meta.url));
const README = fileURLToPath(new URL('../../../README.md', import.meta.url));

describe("the README's quickstart (configs/quickstart.yaml, Fashion-MNIST)", function () {
  this.timeout(1_200_000);

  it("is the README's: its set-up and training command runs this config, and its test command is npm test", () => {
    const readme = readFileSync(README, 'utf8');
    assert.match(readme, /^bash scripts\/setup\.sh && npx ssl-train --config configs\/quickstart\.yaml$/m);
    assert.match(readme, /^npm test$/m);
  });

  it('prints the random-init baseline first, then kNN top-1 rises clearly above it', () => {
    const runDir = join(tempDir(), 'quickstart');
    const { status, stdout, stderr } = runCli(['--config', QUICKSTART, '--run-dir', runDir], 1_100_000);
    assert.equal(status, 0, stderr);
    const lines = stdout.split('\n');
    assert.match(lines[0], /^before training \(step 0\): .*knn_acc1=0\.\d+/, stdout);
    const rows = readFileSync(join(runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>)
      .filter((r) => r['val/knn_acc1'] !== undefined);
    assert.deepEqual(
      rows.map((r) => r.step),
      [0, 60, 120],
      'baseline, then each epoch',
    );
    const [baseline, , last] = rows.map((r) => r['val/knn_acc1']);
    assert.ok(last >= baseline + 0.03, `kNN top-1 ${last} after 2 epochs vs ${baseline} at random init`);
  });
});

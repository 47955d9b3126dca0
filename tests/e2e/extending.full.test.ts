import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SMOKE_FLAGS, tempDir } from '../helpers/run.js';

/** docs/extending.md's example, run as a user runs it: the CLI, from a script that registers its own classes first. */
const script = fileURLToPath(new URL('../../examples/inject.js', import.meta.url));

function run(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', timeout: 180_000, env: { ...process.env, FORCE_COLOR: '0' } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('examples/inject.js: a user strategy, logger and callback registered by class, selected with --strategy', function () {
  this.timeout(240_000);

  it('--strategy counting trains with the registered strategy; the logger and callback classes are constructed and used', () => {
    const runDir = join(tempDir(), 'run');
    // 256 samples / batch 32: 8 steps in the one epoch.
    const r = run([...SMOKE_FLAGS, '--strategy', 'counting', '--epochs', '1', '--val-every', '0', '--log-every', '1', '--run-dir', runDir]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^counting: 8 gradient reductions$/m, 'the trainer reduced every step through the registered strategy');
    assert.match(r.stdout, /^PrintingLogger: success, 8 losses logged, strategy CountingStrategy$/m, 'the logger class got every step and the run strategy');
    assert.match(r.stdout, /^EpochLine: epoch 1 ended at step 8$/m, 'the callback class ran');
    const config = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(config.strategyInUse, 'counting', 'the run-directory logger registered beside it wrote the config');
    assert.equal(readFileSync(join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n').length, 8);
  });

  it('an unknown --strategy is one line listing the registered strategies, the user one included, exit 2', () => {
    const r = run([...SMOKE_FLAGS, '--strategy', 'fsdp']);
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^ssl-train: error: --strategy: "fsdp" is not allowed; expected one of auto, single, ddp, counting \(the registered strategies\)$/m);
  });

  it('--devices 2 --strategy counting (one process per strategy instance): refused once, before any worker starts, exit 2', () => {
    const r = run([...SMOKE_FLAGS, '--strategy', 'counting', '--devices', '2']);
    assert.equal(r.status, 2, r.stderr);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(
      r.stderr,
      /^ssl-train: error: --strategy: "counting" is not allowed; expected a strategy over all 2 ranks, e\.g\. ddp or auto \(counting runs on 1\)$/m,
    );
  });
});

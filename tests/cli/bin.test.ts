import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { CLI } from '../helpers/run.js';

// `npx ssl-train` executes the built entry point itself (through its `#!/usr/bin/env node`
// line), so every build must leave it executable: tsc writes it without the bit, and npx's
// link to it, made once, would then fail with "Permission denied" after any rebuild
// (`npm test` rebuilds).
describe('the built ssl-train entry point', () => {
  it('runs when executed directly, as npx runs it', () => {
    const r = spawnSync(CLI, ['--help'], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.error, undefined, `executing ${CLI}: ${r.error?.message}`);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^Usage: ssl-train/);
  });

  it('--version (and -V) prints the package version, exit 0', () => {
    const { version } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const r = spawnSync(CLI, [flag], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stdout, `${version}\n`);
    }
  });
});

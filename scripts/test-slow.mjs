#!/usr/bin/env node
// `npm run test:slow [-- mocha options]`: the full tier's files (dist/tests/**/*.full.test.js, after `npm run
// build`), two at a time, the longest first. mocha --parallel hands files to its two workers in
// the order given; in name order the two longest WebGPU files came last, and one of them ran
// alone for 8 minutes after the other worker had finished everything else. LONGEST_FIRST are
// the files that took over 100 s each, longest first, when every file ran on its own two at a
// time (Sapphire Rapids, 2 cores, 2026-11-29); every other file follows in name order. A name
// here that no longer exists is an error, so the list cannot go stale silently.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const LONGEST_FIRST = [
  'distributed/training.full.test.js',
  'browser/steps.full.test.js',
  'verify/engine-against.full.test.js',
  'distributed/webgpu-exactness.full.test.js',
  'e2e/quickstart.full.test.js',
  'browser/page.full.test.js',
  'distributed/zoo-exactness.full.test.js',
  'trainer/signals.full.test.js',
  'distributed/grad-cache.full.test.js',
  'trainer/trainer.full.test.js',
  'distributed/multicrop.full.test.js',
];

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const tests = join(root, 'dist', 'tests');

/** Every `*.full.test.js` under `dir`, relative to dist/tests, in name order. */
function fullTierFiles(dir) {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return fullTierFiles(path);
      return name.endsWith('.full.test.js') ? [relative(tests, path)] : [];
    });
}

if (!existsSync(tests)) {
  console.error('test:slow: no dist/tests; run `npm run build` first');
  process.exit(2);
}
const all = fullTierFiles(tests);
const missing = LONGEST_FIRST.filter((file) => !all.includes(file));
if (missing.length > 0) {
  console.error(`test:slow: LONGEST_FIRST in scripts/test-slow.mjs names files that do not exist: ${missing.join(', ')}`);
  process.exit(2);
}
const ordered = [...LONGEST_FIRST, ...all.filter((file) => !LONGEST_FIRST.includes(file))];
const mocha = join(root, 'node_modules', 'mocha', 'bin', 'mocha.js');
const run = spawnSync(process.execPath, [mocha, '--parallel', '--jobs', '2', ...process.argv.slice(2), ...ordered.map((file) => join('dist', 'tests', file))], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, OMP_WAIT_POLICY: 'passive' },
});
process.exit(run.status ?? 1);

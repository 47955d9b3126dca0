#!/usr/bin/env node
// `npm run build` compiles incrementally (tsconfig.tests.json: `incremental`, its state in
// dist/.tsbuildinfo): tsc re-emits what changed, and nothing for a source that was deleted or
// renamed. This removes such outputs first, every dist/<folder>/**/X.{js,d.ts}(.map) whose
// <folder>/**/X.ts is gone, so that a deleted test file no longer runs and a deleted module no
// longer imports. Files tsc does not write (dist/src/core/tfjs-gradients.cjs) are left alone.
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');
const OUTPUT = /\.(js|d\.ts)(\.map)?$/;

/** Every file under `dir`. */
function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

let pruned = 0;
if (existsSync(dist)) {
  for (const path of files(dist)) {
    const output = relative(dist, path);
    if (!OUTPUT.test(output)) continue;
    if (!existsSync(join(root, output.replace(OUTPUT, '.ts')))) {
      rmSync(path);
      pruned++;
    }
  }
}
if (pruned > 0) console.log(`prune-dist: removed ${pruned} output file(s) whose TypeScript source is gone`);

#!/usr/bin/env node
// Builds every native addon under native/<name>/binding.gyp with node-gyp.
// With --optional (the npm install hook) a failed build prints a warning and exits 0:
// ssl-zoo then runs with the pure-JS kernels and a single process, and says so when asked
// for more. Without --optional a failure exits non-zero.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const optional = process.argv.includes('--optional');
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const nativeDir = join(root, 'native');
const require = createRequire(import.meta.url);

function nodeGypCommand() {
  try {
    return [process.execPath, require.resolve('node-gyp/bin/node-gyp.js')];
  } catch {
    // Installed as a dependency without devDependencies: npm ships its own node-gyp.
    return process.env.npm_config_node_gyp ? [process.execPath, process.env.npm_config_node_gyp] : ['node-gyp'];
  }
}

const addons = existsSync(nativeDir) ? readdirSync(nativeDir).filter((name) => existsSync(join(nativeDir, name, 'binding.gyp'))) : [];
let failed = 0;
for (const name of addons) {
  const [cmd, ...args] = nodeGypCommand();
  const result = spawnSync(cmd, [...args, 'rebuild', '--release'], {
    cwd: join(nativeDir, name),
    stdio: optional ? ['ignore', 'ignore', 'pipe'] : 'inherit',
    encoding: 'utf8',
  });
  if (result.status === 0) {
    console.log(`ssl-zoo: built native addon '${name}'`);
  } else {
    failed++;
    const tail = (result.stderr ?? '').trim().split('\n').slice(-5).join('\n');
    console.warn(`ssl-zoo: native addon '${name}' did not build; see docs/performance.md, "Native addons".${tail ? `\n${tail}` : ''}`);
  }
}
process.exit(failed > 0 && !optional ? 1 : 0);

#!/usr/bin/env node
// tfjs-core's Node entry point registers no gradient functions: they ship only as
// extensionless ES modules (dist/register_all_gradients.js) that the @tensorflow/tfjs
// umbrella package bundles. This bundles exactly that module (tfjs keeps its engine and
// registries in globals, so the bundled copies register into the one engine ssl-zoo uses)
// to dist/src/core/tfjs-gradients.cjs, which src/core/tf.ts loads.
import { build } from 'esbuild';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const coreDir = dirname(require.resolve('@tensorflow/tfjs-core/package.json'));

await build({
  entryPoints: [join(coreDir, 'dist', 'register_all_gradients.js')],
  outfile: join(root, 'dist', 'src', 'core', 'tfjs-gradients.cjs'),
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  logLevel: 'warning',
});

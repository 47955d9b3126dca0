#!/usr/bin/env node
/**
 * `node scripts/bundle-gpu.mjs [--out .tmp/ssl-zoo-gpu.tar.xz] [--fmnist-train 20000]
 * [--no-data] [--max-mib 60]`: packs what scripts/gpu-check.sh needs on a Linux x86-64 machine
 * with an NVIDIA GPU but no Node.js and no network, into one tar.xz:
 *
 *   ssl-zoo-gpu/bin/node          this machine's node (process.execPath)
 *   ssl-zoo-gpu/dist/src, dist/scripts/bench, package.json, configs/   (run `npm run build` first)
 *   ssl-zoo-gpu/node_modules/     the runtime dependencies dist loads on the WebGPU path
 *                                 (the closure of package.json's dependencies, less echarts,
 *                                 resvg and node-addon-api, which only the report commands load,
 *                                 dynamically), without source maps and type declarations;
 *                                 webgpu with only dist/linux-x64/dawn.node. A trial import of
 *                                 the CLI and the bench modules (not the library entry, which
 *                                 loads the report renderers statically), run in the staged
 *                                 folder with this node, fails the bundle on a missing package
 *   ssl-zoo-gpu/lib/              libvulkan.so.1 from this machine (Debian libvulkan1), used
 *                                 when the GPU machine has no Vulkan loader
 *   ssl-zoo-gpu/scripts/          step_torch.py and the PyTorch modules it imports, gpu-check.sh
 *   ssl-zoo-gpu/data/fashion-mnist/  the test split and the first --fmnist-train training
 *                                 images (the full training split would not fit the 64 MiB)
 *
 * Fails when the archive is over --max-mib. Prints its path and size.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync, gzipSync } from 'node:zlib';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const out = resolve(arg('out', join(root, '.tmp/ssl-zoo-gpu.tar.xz')));
const fmnistTrain = Number(arg('fmnist-train', '20000'));
const maxMiB = Number(arg('max-mib', '60'));
const fmnistDir = arg('fmnist-dir', '/usr/share/datasets/fashion-mnist');

/**
 * Dependencies dist loads only on demand (dynamic imports from the report commands) or never
 * at run time; the trial import below fails the bundle if one of them is loaded statically.
 */
const SKIP = new Set(['@resvg/resvg-js', 'echarts', 'node-addon-api']);

for (const f of ['dist/src/cli/bin.js', 'dist/scripts/bench/step-gpu.js', 'dist/scripts/bench/adapter-info.js']) {
  if (!existsSync(join(root, f))) throw new Error(`${f} is missing: run npm run build first`);
}
const stage = mkdtempSync(join(tmpdir(), 'ssl-zoo-gpu-'));
const top = join(stage, 'ssl-zoo-gpu');
const copy = (from, to, filter) => cpSync(from, join(top, to), { recursive: true, dereference: true, filter });
const noMaps = (src) => !/\.(map|d\.ts|ts|md)$/.test(src) || statSync(src).isDirectory();

try {
  mkdirSync(join(top, 'bin'), { recursive: true });
  cpSync(process.execPath, join(top, 'bin/node'));
  copy(join(root, 'dist/src'), 'dist/src', noMaps);
  copy(join(root, 'dist/scripts/bench'), 'dist/scripts/bench', noMaps);
  copy(join(root, 'package.json'), 'package.json');
  if (existsSync(join(root, 'configs'))) copy(join(root, 'configs'), 'configs');
  for (const f of [
    'bench/step_torch.py',
    'bench/torchvision_free_resnet.py',
    'gen_backbone_fixtures.py',
    'gen_optim_fixtures.py',
    'gen_vit_fixtures.py',
    'gpu-check.sh',
  ]) {
    copy(join(root, 'scripts', f), join('scripts', f));
  }

  // The runtime closure of package.json's dependencies, resolved as Node does from each package.
  const seen = new Map(); // package dir -> name
  const visit = (name, fromDir) => {
    if (SKIP.has(name)) return;
    let dir = fromDir;
    for (;;) {
      const candidate = join(dir, 'node_modules', name);
      if (existsSync(join(candidate, 'package.json'))) {
        const real = realpathSync(candidate);
        if (seen.has(real)) return;
        seen.set(real, name);
        const pkg = JSON.parse(readFileSync(join(real, 'package.json'), 'utf8'));
        for (const dep of Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies })) visit(dep, real);
        return;
      }
      const parent = dirname(dir);
      if (parent === dir) return; // an optional dependency not installed here
      dir = parent;
    }
  };
  const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  for (const dep of Object.keys(rootPkg.dependencies)) visit(dep, root);
  const modulesRoot = realpathSync(join(root, 'node_modules'));
  for (const [dir, name] of seen) {
    const rel = relative(modulesRoot, dir);
    if (rel.startsWith('..')) throw new Error(`dependency ${name} outside node_modules: ${dir}`);
    const webgpuDist = join(dir, 'dist');
    copy(dir, join('node_modules', rel), (src) => {
      if (name === 'webgpu' && src.startsWith(webgpuDist + '/') && !src.startsWith(join(webgpuDist, 'linux-x64'))) return false;
      if (src.includes('/node_modules/') && src.slice(dir.length).includes('/node_modules/')) return false; // nested: copied on their own
      return noMaps(src);
    });
  }

  // The Vulkan loader, for GPU machines without one.
  const libDir = '/usr/lib/x86_64-linux-gnu';
  if (existsSync(join(libDir, 'libvulkan.so.1'))) {
    mkdirSync(join(top, 'lib'), { recursive: true });
    cpSync(realpathSync(join(libDir, 'libvulkan.so.1')), join(top, 'lib/libvulkan.so.1'));
  } else console.warn('no /usr/lib/x86_64-linux-gnu/libvulkan.so.1 here: the bundle carries no Vulkan loader');

  // Fashion-MNIST: the test split, and the first N training images and labels (IDX headers rewritten).
  if (!process.argv.includes('--no-data') && existsSync(fmnistDir)) {
    const dataOut = join(top, 'data/fashion-mnist');
    mkdirSync(dataOut, { recursive: true });
    for (const f of ['t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz']) cpSync(join(fmnistDir, f), join(dataOut, f));
    for (const [f, itemBytes, headerBytes] of [
      ['train-images-idx3-ubyte.gz', 28 * 28, 16],
      ['train-labels-idx1-ubyte.gz', 1, 8],
    ]) {
      const raw = gunzipSync(readFileSync(join(fmnistDir, f)));
      const n = Math.min(fmnistTrain, raw.readUInt32BE(4));
      const sub = Buffer.from(raw.subarray(0, headerBytes + n * itemBytes));
      sub.writeUInt32BE(n, 4);
      writeFileSync(join(dataOut, f), gzipSync(sub, { level: 9 }));
    }
    writeFileSync(join(dataOut, 'SUBSET.txt'), `Fashion-MNIST: the first ${fmnistTrain} training images of 60000 (header rewritten), the whole test split.\n`);
  } else console.warn(`Fashion-MNIST not carried (${existsSync(fmnistDir) ? '--no-data' : `${fmnistDir} missing`})`);

  // Trial: load the module graphs gpu-check runs, from the staged folder (no node_modules above it).
  const trial = [
    'dist/src/cli/main.js',
    'dist/scripts/bench/simclr-step.js',
    'dist/scripts/bench/flops.js',
    'dist/src/core/webgpu.js',
    'webgpu',
    '@tensorflow/tfjs-backend-webgpu',
  ];
  const script = `for (const m of ${JSON.stringify(trial)}) await import(m.startsWith('dist/') ? './' + m : m);`;
  execFileSync(join(top, 'bin/node'), ['--input-type=module', '-e', script], { cwd: top, stdio: ['ignore', 'ignore', 'inherit'] });
  console.error(`trial import from ${top}: ok`);

  mkdirSync(dirname(out), { recursive: true });
  rmSync(out, { force: true });
  execFileSync('bash', ['-c', `tar -C "$1" -cf - ssl-zoo-gpu | xz -9 -T0 > "$2"`, 'bundle', stage, out], { stdio: 'inherit' });
  const rawBytes = Number(execFileSync('du', ['-sb', top], { encoding: 'utf8' }).split('\t')[0]);
  const bytes = statSync(out).size;
  const mib = bytes / 2 ** 20;
  const listing = readdirSync(join(top, 'node_modules'));
  console.log(
    JSON.stringify({
      bundle: out,
      bytes,
      mib: Number(mib.toFixed(2)),
      raw_mib: Number((rawBytes / 2 ** 20).toFixed(1)),
      node: process.version,
      node_modules: listing,
    }),
  );
  if (mib > maxMiB) throw new Error(`bundle is ${mib.toFixed(1)} MiB, over --max-mib ${maxMiB}`);
} finally {
  rmSync(stage, { recursive: true, force: true });
}

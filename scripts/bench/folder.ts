/**
 * `npm run bench:folder`: training from an image folder (`--dataset folder`) against the same
 * data in memory (`--dataset fashion-mnist`), at equal settings, and the peak memory of folder
 * training at 10k and 60k files. Writes bench-results/folder.json.
 *
 * The Fashion-MNIST PNG folder (`--root`, default /work/fmnist-png: train/<class>/<i>.png,
 * test/<class>/<i>.png, grayscale, lossless) is written once from the IDX files and reused;
 * the 10k folder (`<root>-10k`) hard-links the first 1000 training files of each class.
 * Every run is a fresh process (`--child`; the three run at the same time), so its
 * `process.resourceUsage().maxRSS` is that run's peak RSS, loader worker threads included. Settings (equal for all runs): SimCLR,
 * mlp backbone, image size 28, batch 256, seed 0, one epoch cut at `--steps` optimizer steps
 * (default 30: the machine this was measured on was shared), 1 loader worker, then kNN (k 20, tau 0.07, memory: a seeded 10k of the
 * training images) and the online linear top-1 on the 10k test images.
 */
import { spawn } from 'node:child_process';
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { loadFashionMnist } from '../../src/data/idx.js';
import { buildConfig, type TrainConfigInput } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { flag, writeReport } from './common.js';

const ROOT = flag('root', '/work/fmnist-png');
const STEPS = Number(flag('steps', '30'));

/** The class folder name of a Fashion-MNIST class. */
const folderName = (name: string): string => name.replace(/[^A-Za-z0-9-]/g, '_');

/** Writes `<root>/<split>/<class>/<index>.png` for both splits, unless already complete. */
async function writePngFolder(root: string): Promise<void> {
  if (existsSync(join(root, 'COMPLETE'))) return;
  for (const split of ['train', 'test'] as const) {
    const ds = loadFashionMnist(split);
    for (const name of ds.classNames) mkdirSync(join(root, split, folderName(name)), { recursive: true });
    for (let start = 0; start < ds.length; start += 64) {
      const images = Array.from({ length: Math.min(64, ds.length - start) }, (_, k) => start + k);
      await Promise.all(
        images.map((i) =>
          sharp(Buffer.from(ds.pixels.subarray(i * 784, (i + 1) * 784)), { raw: { width: 28, height: 28, channels: 1 } })
            .toColourspace('b-w')
            .png()
            .toFile(join(root, split, folderName(ds.classNames[ds.labels[i]]), `${String(i).padStart(5, '0')}.png`)),
        ),
      );
    }
  }
  writeFileSync(join(root, 'COMPLETE'), 'ok\n');
}

/** `<root>-10k/train`: hard links to the first `perClass` files of each training class. */
function linkSubset(root: string, perClass: number): string {
  const dir = `${root}-10k`;
  if (existsSync(join(dir, 'COMPLETE'))) return dir;
  for (const cls of readdirSync(join(root, 'train'))) {
    mkdirSync(join(dir, 'train', cls), { recursive: true });
    for (const f of readdirSync(join(root, 'train', cls))
      .sort()
      .slice(0, perClass)) {
      if (!existsSync(join(dir, 'train', cls, f))) linkSync(join(root, 'train', cls, f), join(dir, 'train', cls, f));
    }
  }
  writeFileSync(join(dir, 'COMPLETE'), 'ok\n');
  return dir;
}

/** What one run reports. */
interface RunResult {
  knnTop1: number;
  linearTop1: number;
  trainSize: number;
  peakRssMiB: number;
  wallSec: number;
}

/** The settings shared by every run (see the module comment). */
const COMMON: TrainConfigInput = { method: 'simclr', backbone: 'mlp', imageSize: 28, batchSize: 256, seed: 0, epochs: 1, workers: 1, knnTrainSamples: 10000 };

/** Child: one training run in this process; prints its RunResult as the last stdout line. */
async function child(kind: string, dataDir: string | undefined, runDir: string): Promise<void> {
  const input: TrainConfigInput =
    kind === 'memory'
      ? { ...COMMON, dataset: 'fashion-mnist' }
      : { ...COMMON, dataset: 'folder', dataDir: join(dataDir!, 'train'), valDir: join(ROOT, 'test') };
  const start = performance.now();
  const { runDir: dir } = await runTraining(buildConfig({ ...input, maxSteps: STEPS, runDir, logEvery: 20 }), { callbacks: [] });
  const wallSec = (performance.now() - start) / 1000;
  const rows = readFileSync(join(dir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  const val = rows.map((l) => JSON.parse(l) as Record<string, number>).find((r) => 'val/knn_acc1' in r)!;
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { trainSize: number };
  const result: RunResult = {
    knnTop1: val['val/knn_acc1'],
    linearTop1: val['val/acc1'],
    trainSize: config.trainSize,
    peakRssMiB: process.resourceUsage().maxRSS / 1024,
    wallSec,
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** Runs one child process; resolves to its result. */
function run(kind: string, dataDir: string | undefined, name: string): Promise<RunResult> {
  const args = [process.argv[1], '--child', kind, '--root', ROOT, '--steps', String(STEPS), '--run-dir', join('bench-runs', 'folder', name)];
  if (dataDir) args.push('--data', dataDir);
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  return new Promise((resolve, reject) => {
    proc.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${name} run failed (exit ${code})`));
      const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as RunResult;
      process.stderr.write(`${name}: ${JSON.stringify(result)}\n`);
      resolve(result);
    });
  });
}

function cpuDescription(): string {
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  const isa = /\bavx512f\b/.test(flags) ? 'AVX-512' : /\bavx2\b/.test(flags) ? 'AVX2' : 'no AVX2';
  return `${cpus()[0]?.model.trim() ?? 'unknown'} (${isa}, ${cpus().length} cores)`;
}

async function main(): Promise<void> {
  if (process.argv.includes('--child')) {
    const data = process.argv.includes('--data') ? flag('data', '') : undefined;
    return child(flag('child', ''), data, flag('run-dir', ''));
  }
  await writePngFolder(ROOT);
  const small = linkSubset(ROOT, 1000);
  const [memory, folder60k, folder10k] = await Promise.all([
    run('memory', undefined, 'fashion-mnist'),
    run('folder', ROOT, 'folder-60k'),
    run('folder', small, 'folder-10k'),
  ]);
  writeReport('folder', {
    settings: { ...COMMON, maxSteps: STEPS, knnK: 20, knnTemperature: 0.07, val: '10k Fashion-MNIST test images (folder runs: the test PNGs)' },
    knn: {
      fashionMnist: memory.knnTop1,
      folder: folder60k.knnTop1,
      differencePoints: 100 * (folder60k.knnTop1 - memory.knnTop1),
      linear: { fashionMnist: memory.linearTop1, folder: folder60k.linearTop1 },
    },
    peakRssMiB: { fashionMnistInMemory: memory.peakRssMiB, folder10k: folder10k.peakRssMiB, folder60k: folder60k.peakRssMiB },
    trainSize: { fashionMnist: memory.trainSize, folder10k: folder10k.trainSize, folder60k: folder60k.trainSize },
    wallSec: { fashionMnist: memory.wallSec, folder10k: folder10k.wallSec, folder60k: folder60k.wallSec },
    cpu: cpuDescription(),
    date: new Date().toISOString(),
  });
}

await main();

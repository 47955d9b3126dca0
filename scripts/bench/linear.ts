/**
 * bench:linear: `ssl-train linear` (no augmentation, precomputed features) of a finished
 * pre-training run, beside the same evaluation of the random-init backbone (the run's
 * architecture and seed, untrained) and of the raw pixels (the eval views flattened).
 * Each evaluation gets its own run directory under bench-runs/linear/ (readable by
 * `ssl-train compare`); the figures go to bench-results/linear.json.
 *
 * Usage: npm run bench:linear -- [--run bench-runs/zoo/simclr] [--epochs 100] [--batch-size 512] [--lr 0.1]
 */
import { execSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { runLinearEval, type LinearFeatures } from '../../src/experiment/linear-eval.js';
import { resolvePretrained } from '../../src/experiment/pretrained.js';
import { flag, writeReport } from './common.js';

/** The CPU as `lscpu` names it, with its widest vector extensions. */
function cpuDescription(): { model: string; avx2: boolean; avx512: boolean; amx: boolean; cores: number } {
  let model = cpus()[0]?.model.trim() ?? 'unknown';
  try {
    model = /^Model name:\s*(.*)$/m.exec(execSync('lscpu', { encoding: 'utf8' }))?.[1]?.trim() ?? model;
  } catch {
    // no lscpu: the model from os.cpus()
  }
  const flags = readFileSync('/proc/cpuinfo', 'utf8');
  return { model, avx2: /\bavx2\b/.test(flags), avx512: /\bavx512f\b/.test(flags), amx: /\bamx_tile\b/.test(flags), cores: cpus().length };
}

async function main(): Promise<void> {
  const runPath = flag('run', 'bench-runs/zoo/simclr');
  const epochs = Number(flag('epochs', '100'));
  const batchSize = Number(flag('batch-size', '512'));
  const lr = Number(flag('lr', '0.1'));
  const source = resolvePretrained(runPath, '--run');
  const rows: Array<[string, LinearFeatures]> = [
    [`${source.config.method} (${source.config.epochs} epochs)`, { kind: 'pretrained', source }],
    ['random init', { kind: 'random-init', config: source.config }],
    ['raw pixels', { kind: 'pixels', config: source.config }],
  ];
  const results = [];
  for (const [name, features] of rows) {
    const runDir = join('bench-runs', 'linear', features.kind);
    rmSync(runDir, { recursive: true, force: true });
    process.stderr.write(`bench:linear: ${name} -> ${runDir}\n`);
    const result = await runLinearEval({
      features,
      data: {},
      runDir,
      epochs,
      batchSize,
      lr,
      momentum: 0.9,
      weightDecay: 0,
      augmentation: 'none',
      finetune: false,
      seed: 0,
      trainSamples: 0,
      valSamples: 0,
      tracking: {},
      print: (line) => process.stderr.write(`bench:linear: ${name}: ${line}\n`),
    });
    results.push({
      features: name,
      runDir,
      top1: result.final.val.top1,
      top5: result.final.val.top5,
      bestTop1: Math.max(...result.history.map((h) => h.val.top1)),
      featureSec: result.featureSec,
      wallTimeSec: result.wallTimeSec,
    });
  }
  writeReport('linear', {
    benchmark: 'linear',
    source: {
      path: runPath,
      checkpoint: source.checkpointPath,
      step: source.step,
      method: source.config.method,
      backbone: source.config.backbone,
      dataset: source.config.dataset,
    },
    recipe: {
      epochs,
      batchSize,
      lr,
      appliedLr: (lr * batchSize) / 256,
      momentum: 0.9,
      weightDecay: 0,
      scheduler: 'cosine',
      augmentation: 'none (precomputed features)',
    },
    rows: results,
    cpu: cpuDescription(),
    date: new Date().toISOString(),
  });
}

await main();

/**
 * `npm run bench:step`: the time of one SimCLR training step (two views, forward,
 * NT-Xent, backward, LARS step) for `tiny_resnet` at batch 256 on 28x28x1, CIFAR-stem
 * `resnet18` and `vit_tiny` (4 px patches) at batch 64 on 32x32x3, on ssl-zoo's engines
 * (each in its own process) and in PyTorch (`/usr/bin/python3`, Debian python3-torch) in
 * the same run.
 *
 * Flags: --models tiny_resnet,resnet18,vit_tiny  --backends cpu,cpu-js  --reps 3  --js-reps 1
 *        --js-models tiny_resnet (the pure-JS engine is slow: resnet18 takes many minutes)
 *        --threads 2 (PyTorch threads; ssl-zoo's native kernels use the process's cores)
 *        --batch B (every model at batch B instead of its own)
 * Prints one JSON object as its last line and writes bench-results/step.json; per model:
 * `sslzoo_s` (default engine), `pytorch_s`, `ratio` = sslzoo_s / pytorch_s, and
 * `sslzoo_cpu_js_s` where measured.
 */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { initEngine, type BackendChoice } from '../../src/core/engine.js';
import { flag, median, timeSteps, writeReport } from './common.js';
import { buildSimclrStep, STEP_MODELS } from './simclr-step.js';

/** Child process: times `reps` steps (after one warm-up step when reps > 1). */
async function child(backend: BackendChoice, model: string, reps: number, batch: number | undefined): Promise<void> {
  const engine = await initEngine(backend);
  const times = timeSteps(buildSimclrStep(model, { batch }), reps);
  process.stdout.write(`${JSON.stringify({ backend, model, native: engine.nativeKernels, seconds: median(times), steps: times })}\n`);
}

function lastJson(text: string): Record<string, unknown> {
  const lines = text.trim().split('\n');
  return JSON.parse(lines[lines.length - 1]) as Record<string, unknown>;
}

async function main(): Promise<void> {
  if (process.argv.includes('--child')) {
    await child(flag('backend', 'cpu') as BackendChoice, flag('model', 'tiny_resnet'), Number(flag('reps', '3')), Number(flag('batch', '0')) || undefined);
    return;
  }
  const models = flag('models', 'tiny_resnet,resnet18,vit_tiny').split(',');
  const backends = flag('backends', 'cpu,cpu-js').split(',');
  const jsModels = flag('js-models', 'tiny_resnet').split(',');
  const reps = flag('reps', '3');
  const jsReps = flag('js-reps', '1');
  const threads = flag('threads', '2');
  const self = fileURLToPath(import.meta.url);
  const torchScript = fileURLToPath(new URL('../../../scripts/bench/step_torch.py', import.meta.url));
  const results: Record<string, Record<string, unknown>> = {};
  for (const model of models) {
    const spec = STEP_MODELS[model];
    const batch = Number(flag('batch', String(spec.batch)));
    const entry: Record<string, unknown> = { batch, image: [spec.size, spec.size, spec.channels] };
    for (const backend of backends) {
      if (backend === 'cpu-js' && !jsModels.includes(model)) continue;
      const r = spawnSync(
        process.execPath,
        [self, '--child', '--backend', backend, '--model', model, '--reps', backend === 'cpu-js' ? jsReps : reps, '--batch', String(batch)],
        {
          encoding: 'utf8',
          maxBuffer: 1 << 24,
        },
      );
      if (r.status !== 0) throw new Error(`ssl-zoo ${backend} ${model} failed:\n${r.stderr}`);
      const out = lastJson(r.stdout);
      if (backend === 'cpu-js') entry.sslzoo_cpu_js_s = out.seconds;
      else {
        entry.sslzoo_s = out.seconds;
        entry.sslzoo_backend = backend;
        entry.native_kernels = out.native;
        entry.sslzoo_steps = out.steps;
      }
      process.stderr.write(`${model} ${backend}: ${(out.seconds as number).toFixed(3)} s/step\n`);
    }
    const py = spawnSync('/usr/bin/python3', [torchScript, model, String(batch), String(spec.size), String(spec.channels), reps, threads], {
      encoding: 'utf8',
    });
    if (py.status !== 0) throw new Error(`PyTorch reference failed (needs Debian python3-torch):\n${py.stderr}`);
    const torch = lastJson(py.stdout);
    entry.pytorch_s = torch.pytorch_s;
    entry.pytorch_threads = Number(threads);
    process.stderr.write(`${model} pytorch: ${(torch.pytorch_s as number).toFixed(3)} s/step\n`);
    if (typeof entry.sslzoo_s === 'number') entry.ratio = entry.sslzoo_s / (torch.pytorch_s as number);
    results[model] = entry;
  }
  const report = { benchmark: 'step', method: 'simclr', cpus: cpus().length, cpu_model: cpus()[0]?.model, date: new Date().toISOString(), models: results };
  writeReport('step', report);
}

await main();

/**
 * `npm run bench:step-gpu`: the SimCLR training step of `bench:step` (two views, forward,
 * NT-Xent, backward, LARS update) on the WebGPU engine (or any engine: `--backend`), timed
 * step by step with one `await` on the step's loss at the end of each step (WebGPU in Node
 * cannot read synchronously). Each model runs in its own process.
 *
 * Flags: --models tiny_resnet,resnet18,vit_tiny  --backend webgpu  --batch 256  --size S
 *        (image side for every model; default each model's: 28 for tiny_resnet, 32 otherwise)
 *        --reps 5 (timed steps, after --warmup 1 untimed steps)  --peak-tflops X (the GPU's
 *        FP32 peak, for `peak_fraction`)  --name step-gpu (bench-results/<name>.json)
 *
 * FLOPs: the convolutions and matrix products the step actually runs, counted from the
 * shapes of each kernel call during a warm-up step (scripts/bench/flops.ts: 2 per
 * multiply-add; element-wise kernels not counted), and the forward pass alone counted the
 * same way (`forward_flops`; `3 * forward_flops` is the usual estimate of a training step).
 * `tflops` = counted step FLOPs / median step seconds. `images_per_s` = batch / step seconds
 * (each image is seen as two views).
 *
 * Prints one JSON object as its last line and writes bench-results/<name>.json.
 */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { initEngine, type BackendChoice } from '../../src/core/engine.js';
import { tf } from '../../src/core/tf.js';
import { exitWhenFlushed, flag, median, writeReport } from './common.js';
import { installFlopCounter } from './flops.js';
import { buildSimclrDeviceStep, STEP_MODELS } from './simclr-step.js';

async function child(): Promise<void> {
  const backend = flag('backend', 'webgpu') as BackendChoice;
  const model = flag('model', 'tiny_resnet');
  const batch = Number(flag('batch', '256'));
  const size = Number(flag('size', '0')) || STEP_MODELS[model].size;
  const reps = Number(flag('reps', '5'));
  const warmup = Number(flag('warmup', '1'));
  const engine = await initEngine(backend);
  const counter = installFlopCounter(tf.getBackend());
  const t0 = performance.now();
  const { step, forward } = buildSimclrDeviceStep(model, { batch, size });
  const forwardCount = counter.count(forward);
  // The first step compiles the shaders; it is timed apart and counted.
  const first = performance.now();
  const { result: loss0, flops, byKernel } = counter.count(step);
  const loss0Value = (await loss0.data())[0];
  loss0.dispose();
  const firstStepS = (performance.now() - first) / 1000;
  for (let i = 1; i < warmup; i++) {
    const l = step();
    await l.data();
    l.dispose();
  }
  const times: number[] = [];
  let lastLoss = NaN;
  for (let i = 0; i < reps; i++) {
    const start = performance.now();
    const l = step();
    lastLoss = (await l.data())[0];
    l.dispose();
    times.push((performance.now() - start) / 1000);
  }
  const seconds = median(times);
  const out = {
    backend: engine.backend,
    adapter: engine.gpu?.adapter,
    model,
    batch,
    image: [size, size, STEP_MODELS[model].channels],
    seconds,
    steps: times,
    first_step_s: firstStepS,
    setup_s: (first - t0) / 1000,
    images_per_s: batch / seconds,
    flops_per_step: flops,
    flops_by_kernel: byKernel,
    forward_flops: forwardCount.flops,
    tflops: flops / seconds / 1e12,
    tflops_3x_forward: (3 * forwardCount.flops) / seconds / 1e12,
    loss_first: loss0Value,
    loss_last: lastLoss,
    tensors_after: tf.memory().numTensors,
  };
  process.stdout.write(`${JSON.stringify(out)}\n`);
  await exitWhenFlushed();
}

function lastJson(text: string): Record<string, unknown> {
  const lines = text.trim().split('\n');
  return JSON.parse(lines[lines.length - 1]) as Record<string, unknown>;
}

async function main(): Promise<void> {
  if (process.argv.includes('--child')) return child();
  const models = flag('models', 'tiny_resnet,resnet18,vit_tiny').split(',');
  const backend = flag('backend', 'webgpu');
  const peak = Number(flag('peak-tflops', '0')) || undefined;
  const passThrough = ['batch', 'size', 'reps', 'warmup'].flatMap((n) => (process.argv.includes(`--${n}`) ? [`--${n}`, flag(n, '')] : []));
  const self = fileURLToPath(import.meta.url);
  const results: Record<string, Record<string, unknown>> = {};
  let adapter: unknown;
  for (const model of models) {
    const r = spawnSync(process.execPath, [self, '--child', '--backend', backend, '--model', model, ...passThrough], {
      encoding: 'utf8',
      maxBuffer: 1 << 24,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    if (r.status !== 0) {
      const why = (r.stderr || r.stdout || `signal ${r.signal}`).trim().split('\n').slice(-8).join('\n');
      process.stderr.write(`${model} ${backend}: FAILED\n${why}\n`);
      results[model] = { error: why };
      continue;
    }
    const out = lastJson(r.stdout);
    adapter ??= out.adapter;
    delete out.adapter;
    if (peak) out.peak_fraction = (out.tflops as number) / peak;
    results[model] = out;
    process.stderr.write(
      `${model} ${backend} batch ${String(out.batch)} ${(out.image as number[]).join('x')}: ${(out.seconds as number).toFixed(3)} s/step, ` +
        `${(out.images_per_s as number).toPrecision(3)} images/s, ${(out.tflops as number).toPrecision(3)} TFLOP/s` +
        `${peak ? ` (${((100 * (out.tflops as number)) / peak).toFixed(1)}% of ${peak} TFLOP/s)` : ''}\n`,
    );
  }
  const report = {
    benchmark: 'step-gpu',
    method: 'simclr',
    backend,
    adapter,
    peak_tflops: peak ?? null,
    flops_convention: 'conv + matmul of the step as run (fwd + bwd), 2 per multiply-add; element-wise ops not counted',
    cpus: cpus().length,
    cpu_model: cpus()[0]?.model,
    date: new Date().toISOString(),
    models: results,
  };
  writeReport(flag('name', 'step-gpu'), report);
}

await main();

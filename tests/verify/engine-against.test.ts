/**
 * `ssl-train verify --engine-against`: the WebGPU engine (on SwiftShader here, tests/helpers/webgpu.ts)
 * against the native cpu engine on the smallest SimCLR setting (mlp on 8x8 synthetic images,
 * batch 8, 2 steps), each check in its own worker process (engine-against-worker.ts: a device
 * that failed a step is not reused); two negative controls, Relu kernels registered on the
 * webgpu backend in the worker: one that leaks 5% of negative inputs must fail naming the
 * tensors it moved, one that reads its input synchronously must fail naming the read; and the
 * CLI's wiring (exit codes, refused combinations) on the two cpu engines.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { TrainConfigInput } from '../../src/experiment/config.js';
import type { EngineCheckOptions, EngineCheckResult } from '../../src/verify/engine-against.js';
import { boundRatio, DEFAULT_ROUNDOFF_FACTOR } from '../../src/verify/roundoff.js';
import type { EngineWorkerSpec } from './engine-against-worker.js';
import { runCli } from '../helpers/run.js';
import { webgpuEnv } from '../helpers/webgpu.js';

const TINY: TrainConfigInput = {
  ...{ method: 'simclr', backbone: 'mlp', dataset: 'synthetic', imageSize: 8, syntheticSize: 16, batchSize: 8, workers: 0, valEvery: 0 },
  ...{ backend: 'webgpu', methodArgs: { projHiddenDim: 16, projOutputDim: 8 } },
};
const OPTIONS: EngineCheckOptions = { steps: 2, tolerance: 1e-5, roundoffFactor: DEFAULT_ROUNDOFF_FACTOR, against: 'cpu' };
const TINY_FLAGS = [
  ...['--method', 'simclr', '--backbone', 'mlp', '--dataset', 'synthetic', '--image-size', '8', '--synthetic-size', '16', '--batch-size', '8'],
  ...['--workers', '0', '--val-every', '0', '--method-arg', 'projHiddenDim=16', '--method-arg', 'projOutputDim=8', '--steps', '2'],
];
const WORKER = fileURLToPath(new URL('./engine-against-worker.js', import.meta.url));

/** The worker's result (JSON: an infinite `worst` reads back as null), whether webgpu's Relu is the original after it, and its report. */
function runWorker(spec: EngineWorkerSpec): { result: EngineCheckResult; originalRelu: boolean; report: string } {
  const run = spawnSync(process.execPath, [WORKER, JSON.stringify(spec)], { encoding: 'utf8', timeout: 100_000, env: webgpuEnv() });
  const line = run.stdout.split('\n').find((l) => l.startsWith('@@result '));
  assert.ok(run.status === 0 && line, `the worker exited ${run.status ?? run.signal}\n${run.stdout}${run.stderr}`);
  const { originalRelu, ...result } = JSON.parse(line.slice('@@result '.length)) as EngineCheckResult & { originalRelu: boolean };
  return { result, originalRelu, report: run.stdout.slice(0, run.stdout.indexOf('@@result ')) };
}

describe('verify --engine-against: webgpu against cpu, in one process per check', function () {
  this.timeout(120_000);

  it('simclr (mlp, 8x8, batch 8, 2 steps): the same initial state, every step within the round-off bound', () => {
    const { result, report } = runWorker({ config: TINY, options: OPTIONS });
    assert.equal(result.error, undefined, report);
    assert.deepEqual(result.initialMismatch, [], report);
    assert.equal(result.steps.length, 2, report);
    assert.ok(result.passed, report);
    assert.match(report, /^verify simclr: engine webgpu against cpu on the same steps/);
    assert.ok(result.syncReadsRefused, report);
    assert.match(
      report,
      /\nno synchronous read of the device in any webgpu step \(each step ran with them refused\)\nPASSED: the worst difference is [0-9.]+ of its bound\n$/,
    );
  });

  it('negative control: a webgpu Relu kernel that reads its input synchronously fails the first step, naming the read and the code that called the kernel (the mlp)', () => {
    const { result, originalRelu, report } = runWorker({ config: TINY, options: OPTIONS, control: 'sync-read' });
    assert.ok(originalRelu, 'the original Relu kernel is registered again after the control');
    assert.equal(result.passed, false, report);
    assert.deepEqual(result.steps, [], report);
    assert.match(
      report,
      /\nFAILED: the webgpu engine could not run step 1 of 2: a synchronous read of the device \(readSync\) inside a training step \(at .*\/src\/backbones\/mlp\.js:\d+:\d+\)\n$/,
    );
  });

  it('negative control: a webgpu Relu kernel leaking 5% of negative inputs fails, naming the tensors it moved', () => {
    const { result, originalRelu, report } = runWorker({ config: TINY, options: OPTIONS, control: 'leaky-relu' });
    assert.ok(originalRelu, 'the original Relu kernel is registered again after the control');
    assert.equal(result.error, undefined, `the wrong kernel must fail the comparison, not the run\n${report}`);
    assert.equal(result.passed, false, report);
    const first = result.steps[0]!;
    // The forward pass changed: the loss, and the gradients of the layers below the leaking ReLUs.
    assert.ok(first.loss.value > first.loss.bound, report);
    assert.ok(first.gradients.value > first.gradients.bound, report);
    const over = result.tensors.filter((t) => boundRatio(t.value, t.bound) > 1);
    assert.ok(
      over.some((t) => t.kind === 'gradient' && t.name.startsWith('backbone.')),
      report,
    );
    assert.deepEqual(result.tensors[0], over[0], 'the tensors are listed furthest from their bound first');
    assert.ok(report.includes(`\n  ${over[0]!.step} ${over[0]!.kind} ${over[0]!.name}: `), report);
    assert.match(report, /FAILED: the worst difference is [0-9.]+ of its bound\n$/);
  });
});

describe('ssl-train verify --engine-against (CLI)', function () {
  this.timeout(60_000);

  it('cpu-js against cpu: the report and exit 0', () => {
    const { status, stdout, stderr } = runCli(['verify', ...TINY_FLAGS, '--backend', 'cpu-js', '--engine-against', 'cpu'], 50_000);
    assert.equal(status, 0, `${stdout}${stderr}`);
    assert.match(stdout, /^verify simclr: engine cpu-js against cpu on the same steps/m);
    assert.match(stdout, /^2 +\d\.\d\de[-+]\d+ \/ /m);
    assert.match(stdout, /^PASSED: the worst difference is [0-9.]+ of its bound$/m);
    assert.doesNotMatch(stdout, /synchronous read/, 'cpu-js reads synchronously by design: nothing is refused there');
  });

  it('an engine other than cpu or cpu-js, and with --devices 2: one-line errors, exit 2', () => {
    const wrong = runCli(['verify', ...TINY_FLAGS, '--engine-against', 'gpu'], 30_000);
    assert.equal(wrong.status, 2, wrong.stderr);
    assert.match(wrong.stderr, /^ssl-train: error: --engine-against: "gpu" is not allowed; expected cpu \| cpu-js$/m);
    const ranks = runCli(['verify', ...TINY_FLAGS, '--engine-against', 'cpu', '--devices', '2'], 30_000);
    assert.equal(ranks.status, 2, ranks.stderr);
    assert.match(ranks.stderr, /^ssl-train: error: --engine-against: compares two engines in one process; use it without --gpus, --devices or --num-nodes$/m);
  });
});

/**
 * DDP's side of the contract, on real processes over Gloo with different data per rank
 * (workers/ddp-contract.ts): the setup broadcast, gradient accumulation, parameters that get
 * no gradient on some ranks, and one gradient sync per optimizer step.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { loadCheckpoint } from '../../src/trainer/checkpoint.js';
import { runCli, tempDir } from '../helpers/run.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import type { ContractSpec } from './workers/ddp-contract.js';

type State = Record<string, number[]>;

interface RankReport {
  rank: number;
  beforeSetup: State;
  afterSetup: State;
  final: State;
  stats?: { gradientAllReduces: number; broadcasts: number };
  losses: number[];
  steps: number;
}

type Options = Omit<ContractSpec, 'dir' | 'rendezvous' | 'timeoutMs'>;

async function fit(options: Options): Promise<RankReport[]> {
  const dir = freshDir('ddp-contract');
  const outcomes = await runRanks('ddp-contract', { ...options, dir, rendezvous: `file://${dir}/store`, timeoutMs: 30_000 }, 90_000);
  expectAllOk(outcomes);
  return outcomes.map((o) => JSON.parse(readFileSync((o.result as { file: string }).file, 'utf8')) as RankReport);
}

/** Largest per-tensor max|a - b| / max|b| (absolute where b is all zeros). */
function worst(a: State, b: State): number {
  assert.deepEqual(Object.keys(a).sort(), Object.keys(b).sort());
  let w = 0;
  for (const [name, ref] of Object.entries(b)) {
    let diff = 0;
    let scale = 0;
    ref.forEach((x, i) => {
      diff = Math.max(diff, Math.abs(a[name][i] - x));
      scale = Math.max(scale, Math.abs(x));
    });
    w = Math.max(w, scale === 0 ? diff : diff / scale);
  }
  return w;
}

describe('DDP contract on real processes with different data per rank', function () {
  this.timeout(300_000);

  it('setup with different initial weights per rank: every rank gets rank 0 parameters and buffers, and the steps match one process', async () => {
    const common = { localBatch: 4, batches: 3, steps: 3, accumulate: 1, batchNorm: true };
    const [r0, r1] = await fit({ ...common, worldSize: 2, perturb: true });
    const [single] = await fit({ ...common, worldSize: 1, localBatch: 8, perturb: false, flagPeriod: 8, flagOffset: 4 });
    // Rank 1 started from other values in every parameter and buffer (or the test proves nothing).
    assert.ok(
      Object.keys(single.afterSetup).some((n) => n.startsWith('bn.running')),
      'the model has buffers',
    );
    for (const name of Object.keys(r0.beforeSetup)) assert.notDeepEqual(r1.beforeSetup[name], r0.beforeSetup[name], `rank 1 ${name} differs before setup`);
    assert.deepEqual(r0.afterSetup, single.afterSetup, 'rank 0 kept its own initial state');
    assert.deepEqual(r1.afterSetup, r0.afterSetup, 'rank 1 holds rank 0 parameters and buffers after setup');
    assert.deepEqual(r1.final, r0.final, 'the ranks stay identical');
    assert.ok(worst(r0.final, single.final) < 1e-5, `worst relative difference to one process ${worst(r0.final, single.final)}`);
    assert.notDeepEqual(single.final, single.afterSetup, 'training moved the weights');
  });

  it('accumulation: 2 ranks with k = 2 micro-batches of N equal one process on batches of 2N for a per-sample loss (the k micro-batch gradients are averaged)', async () => {
    const [r0, r1] = await fit({ worldSize: 2, localBatch: 3, batches: 4, steps: 2, accumulate: 2, batchNorm: false, perturb: false });
    const [single] = await fit({
      worldSize: 1,
      localBatch: 12,
      batches: 2,
      steps: 2,
      accumulate: 1,
      batchNorm: false,
      perturb: false,
      flagPeriod: 6,
      flagOffset: 3,
    });
    assert.equal(r0.steps, 2);
    assert.deepEqual(r1.final, r0.final);
    assert.ok(worst(r0.final, single.final) < 1e-5, `worst relative difference ${worst(r0.final, single.final)}`);
    // One gradient all-reduce per optimizer step (one bucket), not one per micro-batch.
    assert.equal(r0.stats?.gradientAllReduces, 2);
    assert.equal(r1.stats?.gradientAllReduces, 2);
  });

  it('accumulation with batch norm: 2 ranks with k = 2 equal one process with k = 2 over the same global micro-batches', async () => {
    const [r0] = await fit({ worldSize: 2, localBatch: 3, batches: 4, steps: 2, accumulate: 2, batchNorm: true, perturb: false });
    const [single] = await fit({
      worldSize: 1,
      localBatch: 6,
      batches: 4,
      steps: 2,
      accumulate: 2,
      batchNorm: true,
      perturb: false,
      flagPeriod: 6,
      flagOffset: 3,
    });
    assert.ok(worst(r0.final, single.final) < 1e-5, `worst relative difference ${worst(r0.final, single.final)}`);
    assert.equal(r0.stats?.gradientAllReduces, 2);
  });

  it('a parameter used on rank 1 only contributes zeros from rank 0 (no hang), and one used nowhere keeps no gradient', async () => {
    const [r0, r1] = await fit({ worldSize: 2, localBatch: 4, batches: 2, steps: 2, accumulate: 1, batchNorm: false, perturb: false });
    const [single] = await fit({
      worldSize: 1,
      localBatch: 8,
      batches: 2,
      steps: 2,
      accumulate: 1,
      batchNorm: false,
      perturb: false,
      flagPeriod: 8,
      flagOffset: 4,
    });
    assert.notDeepEqual(r0.final.gate, r0.afterSetup.gate, 'gate was trained (by rank 1 gradient)');
    assert.ok(worst({ gate: r0.final.gate }, { gate: single.final.gate }) < 1e-6, 'gate as in one process');
    assert.deepEqual(r1.final.gate, r0.final.gate);
    // Not even weight decay touches it: no rank had a gradient, so it has none (as in one process).
    assert.deepEqual(r0.final.never, [1, 2]);
    assert.deepEqual(r1.final.never, [1, 2]);
    assert.deepEqual(single.final.never, [1, 2]);
    assert.ok(worst(r0.final, single.final) < 1e-5);
  });

  it('simclr (batch-coupled loss, SyncBatchNorm): --devices 2 --accumulate-grad-batches 2 equals one process with the same accumulation', () => {
    const flags = [
      '--backbone',
      'mlp',
      '--dataset',
      'synthetic',
      '--image-size',
      '16',
      '--synthetic-size',
      '96',
      '--workers',
      '0',
      '--val-every',
      '0',
      '--method',
      'simclr',
      '--method-arg',
      'projHiddenDim=32',
      '--method-arg',
      'projOutputDim=16',
      '--batch-size',
      '16',
      '--accumulate-grad-batches',
      '2',
      '--max-steps',
      '2',
      '--epochs',
      '2',
      '--warmup-epochs',
      '0',
    ];
    const models = [1, 2].map((devices) => {
      const runDir = join(tempDir(), 'run');
      const { status, stderr } = runCli([...flags, '--devices', String(devices), '--run-dir', runDir], 180_000);
      assert.equal(status, 0, stderr);
      const ckpt = loadCheckpoint(join(runDir, 'checkpoints', 'last.ckpt'));
      const state: State = {};
      for (const [name, t] of Object.entries(ckpt.tensors)) if (name.startsWith('model/')) state[name] = Array.from(t.dataSync());
      tf.dispose(Object.values(ckpt.tensors));
      return state;
    });
    assert.ok(worst(models[1], models[0]) < 1e-5, `worst relative difference ${worst(models[1], models[0])}`);
  });
});

import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, tempDir } from '../helpers/run.js';
import { SMALL_PREDICTOR, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';

const HEADS: Record<string, string[]> = {
  simclr: SMALL_PROJECTOR,
  barlow_twins: SMALL_PROJECTOR,
  byol: [...SMALL_PROJECTOR, ...SMALL_PREDICTOR],
};

function train(method: string, devices: number, extra: string[] = []): string {
  const runDir = join(tempDir(), 'run');
  const args = [
    ...SMALL_RUN,
    ...HEADS[method],
    '--method',
    method,
    '--devices',
    String(devices),
    '--batch-size',
    '24',
    '--max-steps',
    '3',
    '--epochs',
    '2',
    '--warmup-epochs',
    '0',
    '--run-dir',
    runDir,
    ...extra,
  ];
  const { status, stderr } = runCli(args, 120_000);
  assert.equal(status, 0, stderr);
  return runDir;
}

describe('data-parallel training equals one process on the global batch', function () {
  this.timeout(300_000);

  for (const method of ['simclr', 'barlow_twins', 'byol']) {
    it(`${method}: a 2-rank training run (SyncBatchNorm) ends 3 steps with the one-process parameters and buffers`, () => {
      const single = checkpointTensors(train(method, 1));
      const ddp = checkpointTensors(train(method, 2));
      assert.ok(worstRelative(ddp, single) < 1e-5, `worst relative difference ${worstRelative(ddp, single)}`);
    });

    // 3 ranks: the zoo exactness table (zoo-exactness.full.test.ts) runs each of these methods there.
    for (const devices of [2, 4]) {
      it(`${method}: ssl-train verify --devices ${devices} passes (loss, gradients and parameters over 3 steps)`, () => {
        const { status, stdout, stderr } = runCli(
          ['verify', ...SMALL_RUN, ...HEADS[method], '--method', method, '--devices', String(devices), '--batch-size', '24'],
          120_000,
        );
        assert.equal(status, 0, stdout + stderr);
        assert.match(stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
        assert.equal(
          stdout
            .trim()
            .split('\n')
            .filter((l) => /^\d+\s/.test(l)).length,
          3,
        );
      });
    }
  }

  it('tiny_resnet (convolutions + 9 SyncBatchNorms): verify --devices 2 passes', () => {
    const { status, stdout, stderr } = runCli(
      [
        'verify',
        '--backbone',
        'tiny_resnet',
        '--dataset',
        'synthetic',
        '--image-size',
        '16',
        '--synthetic-size',
        '64',
        '--workers',
        '0',
        '--method',
        'simclr',
        ...HEADS.simclr,
        '--devices',
        '2',
        '--batch-size',
        '16',
      ],
      120_000,
    );
    assert.equal(status, 0, stdout + stderr);
  });

  // `ssl-train verify` with every default (tiny_resnet, batch 256, LARS at the full lr): float32
  // round-off flips ReLUs here, so this is where a fixed 1e-5 tolerance failed. One method in CI;
  // every method, 2 and 3 ranks, over seeds: `npm run bench:verify-zoo -- --seeds 0,1,2,3,4`.
  for (const method of ['simclr']) {
    it(`${method}: ssl-train verify --devices 2 passes with all defaults`, function () {
      // Rank 0 runs the one-process reference and four twins at batch 256: minutes on 2 cores.
      this.timeout(900_000);
      const { status, stdout, stderr } = runCli(['verify', '--method', method, '--devices', '2'], 840_000);
      assert.notEqual(status, null, `verify was stopped after 840 s\n${stdout}${stderr}`);
      assert.equal(status, 0, stdout + stderr);
      const verdict = /PASSED: the worst difference is [0-9.]+ of its bound/.exec(stdout);
      assert.ok(verdict, stdout);
      console.log(`      ${method}, 2 ranks, defaults: ${verdict[0]}`);
    });
  }

  it('verify catches per-rank batch statistics (--sync-batchnorm false) and exits 1', () => {
    const { status, stdout } = runCli(['verify', ...SMALL_RUN, ...HEADS.simclr, '--devices', '2', '--batch-size', '24', '--sync-batchnorm', 'false'], 120_000);
    assert.equal(status, 1);
    assert.match(stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
  });

  it('verify with all defaults catches per-rank batch statistics on tiny_resnet (far above its round-off bound)', () => {
    const { status, stdout } = runCli(['verify', '--method', 'simclr', '--devices', '2', '--steps', '1', '--sync-batchnorm', 'false'], 240_000);
    assert.equal(status, 1, stdout);
    const ratio = Number(/FAILED: the worst difference is ([0-9.]+) of its bound/.exec(stdout)?.[1]);
    assert.ok(ratio > 10, stdout);
  });

  it('verify catches an all-gather whose backward keeps only the local slice (tiny_resnet defaults and mlp)', () => {
    const script = join(process.cwd(), 'dist', 'tests', 'distributed', 'workers', 'wrong-gather-cli.js');
    for (const args of [
      ['--steps', '1'],
      [...SMALL_RUN, ...HEADS.simclr, '--batch-size', '24'],
    ]) {
      const out = spawnSync(process.execPath, [script, 'verify', '--method', 'simclr_local_slice_gather', '--devices', '2', ...args], {
        encoding: 'utf8',
        timeout: 240_000,
      });
      assert.equal(out.status, 1, out.stdout + out.stderr);
      assert.match(out.stdout, /FAILED: the worst difference is [0-9.]+ of its bound/);
    }
  });

  it("verify runs the trainer's own step: with gradient accumulation and with the gradient cache, 2 ranks pass", () => {
    for (const extra of [
      ['--accumulate-grad-batches', '2'],
      ['--norm', 'group', '--grad-cache-chunk', '5'],
    ]) {
      const { status, stdout, stderr } = runCli(
        ['verify', ...SMALL_RUN, ...HEADS.byol, '--method', 'byol', '--devices', '2', '--batch-size', '24', ...extra],
        120_000,
      );
      assert.equal(status, 0, `${extra.join(' ')}\n${stdout}${stderr}`);
      assert.match(stdout, /PASSED: the worst difference is [0-9.]+ of its bound/);
    }
    // The gradient cache with batch norm is refused in verify as in training.
    const bn = runCli(['verify', ...SMALL_RUN, ...HEADS.simclr, '--devices', '2', '--batch-size', '24', '--grad-cache-chunk', '5'], 120_000);
    assert.equal(bn.status, 2, bn.stdout + bn.stderr);
    assert.match(bn.stderr, /--grad-cache-chunk: batch norm \(or IterNorm\) in training mode couples the samples/);
  });

  it('verify --dump writes every step: inputs, both states before it and both gradients, as .npy files', () => {
    const dir = join(tempDir(), 'dump');
    const { status, stdout, stderr } = runCli(
      ['verify', ...SMALL_RUN, ...HEADS.simclr, '--devices', '2', '--batch-size', '24', '--steps', '2', '--dump', dir],
      120_000,
    );
    assert.equal(status, 0, stdout + stderr);
    for (const step of ['step-1', 'step-2']) {
      const header = (file: string) =>
        readFileSync(join(dir, step, file))
          .subarray(0, 128)
          .toString('latin1');
      assert.match(header('view0.npy'), /^\x93NUMPY[\s\S]*'descr': '<f4'[\s\S]*'shape': \(24, 16, 16, 1\)/);
      assert.match(header('labels.npy'), /'descr': '<i4'[\s\S]*'shape': \(24,\)/);
      for (const sub of ['init', 'init-W', 'grads-1', 'grads-W'])
        assert.match(header(join(sub, 'backbone.fc1.weight.npy')), /'shape': \(256, \d+\)/, `${step}/${sub}`);
      const losses = JSON.parse(readFileSync(join(dir, step, 'losses.json'), 'utf8')) as { oneProcess: number; ranks: number };
      assert.ok(Math.abs(losses.ranks - losses.oneProcess) <= 1e-5 * Math.abs(losses.oneProcess), JSON.stringify(losses));
    }
    const init2 = readFileSync(join(dir, 'step-2', 'init', 'backbone.fc1.weight.npy'));
    assert.notDeepEqual(init2, readFileSync(join(dir, 'step-1', 'init', 'backbone.fc1.weight.npy')), 'step 2 starts from the state after step 1');
  });

  it('bucketed gradient all-reduce gives the same parameters as one bucket per tensor', () => {
    const bucketed = checkpointTensors(train('simclr', 2));
    const perTensor = checkpointTensors(train('simclr', 2, ['--bucket-cap-mb', '0.000001']));
    assert.ok(worstRelative(perTensor, bucketed) < 1e-6);
  });
});

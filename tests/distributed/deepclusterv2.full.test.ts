/**
 * DeepCluster v2 with W = 2 and 3 real processes over Gloo, different data per rank:
 * - the memory bank, written epochs, k-means assignments and prototypes (centroids) after an
 *   epoch and the clustering at the next epoch start equal the one-process ones (bank and
 *   assignments exactly; prototypes to float32 round-off), and a per-rank bank and k-means
 *   (the negative control) does not;
 * - (the loss against its float64 PyTorch reference cases, with its per-rank-mean negative
 *   control, is in tests/distributed/losses.full.test.ts with every other loss;)
 * - `ssl-train verify` crossing two epoch boundaries (k-means twice) and a 2-rank training run
 *   against the one-process checkpoint (memory state included).
 */
import { strict as assert } from 'node:assert';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { runCli, tempDir } from '../helpers/run.js';
import { checkpointTensors, worstRelative } from './checkpoints.js';
import { expectAllOk, freshDir, relativeError, runRanks, SMALL_PROJECTOR, SMALL_RUN } from './helpers.js';
import type { DeepClusterWorkerResult } from './workers/deepclusterv2.js';

/** 48 samples, 24 a batch: two steps an epoch, so 5 steps cross two epoch boundaries. */
const SMALL_DEEPCLUSTER = [
  ...SMALL_RUN,
  ...SMALL_PROJECTOR,
  '--synthetic-size',
  '48',
  '--batch-size',
  '24',
  '--method',
  'deepclusterv2',
  '--method-arg',
  'numPrototypes=8',
];

describe('DeepCluster v2: W ranks hold the one-process memory bank, clusters and prototypes', function () {
  this.timeout(300_000);

  for (const W of [2, 3]) {
    describe(`W = ${W}`, () => {
      let outcomes: DeepClusterWorkerResult[] = [];

      before(async () => {
        const dir = freshDir(`deepclusterv2-w${W}`);
        try {
          const raw = await runRanks('deepclusterv2', { dir, worldSize: W, rendezvous: pathToFileURL(join(dir, 'store')).href, timeoutMs: 30_000 }, 90_000);
          expectAllOk(raw);
          outcomes = raw.map((o) => o.result as DeepClusterWorkerResult);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });

      it('bank, written epochs and assignments equal the one-process ones exactly; prototypes to 1e-6', () => {
        for (const [rank, o] of outcomes.entries()) {
          for (const name of ['bank', 'written_epoch', 'assignments']) assert.deepEqual(o.memory[name], o.reference[name], `rank ${rank}: ${name}`);
          assert.ok(relativeError(o.memory.prototypes!, o.reference.prototypes!) <= 1e-6, `rank ${rank}: prototypes`);
          assert.ok(
            o.reference.assignments!.every((a) => a >= 0),
            'every sample was seen and clustered',
          );
          assert.equal(o.leaked, 0, `rank ${rank} leaked tensors`);
        }
      });

      it('negative control: a per-rank bank and k-means give other assignments and prototypes', () => {
        for (const [rank, o] of outcomes.entries()) {
          assert.notDeepEqual(o.perRank.assignments, o.reference.assignments, `rank ${rank}`);
          assert.ok(relativeError(o.perRank.prototypes!, o.reference.prototypes!) > 1e-3, `rank ${rank}: prototypes`);
        }
      });
    });
  }

  for (const devices of [2, 3]) {
    it(`ssl-train verify --devices ${devices} over 5 steps (k-means at two epoch starts) passes, memory state compared`, () => {
      const { status, stdout, stderr } = runCli(['verify', ...SMALL_DEEPCLUSTER, '--devices', String(devices), '--steps', '5'], 240_000);
      assert.equal(status, 0, stdout + stderr);
      assert.match(stdout, /PASSED/);
      assert.match(
        stdout.split('\n').find((l) => l.startsWith('step '))!,
        /\bqueues\b/,
      );
      console.log(`      ${stdout.trim().split('\n').pop()}`);
    });
  }

  it('a 2-rank training run over 3 epochs ends with the one-process checkpoint, memory state included', () => {
    const runs = [1, 2].map((devices) => {
      const runDir = join(tempDir(), 'run');
      const { status, stderr } = runCli(
        [...SMALL_DEEPCLUSTER, '--devices', String(devices), '--epochs', '3', '--warmup-epochs', '0', '--run-dir', runDir],
        180_000,
      );
      assert.equal(status, 0, stderr);
      return checkpointTensors(runDir);
    });
    const [one, two] = runs as [Record<string, Float32Array>, Record<string, Float32Array>];
    assert.deepEqual(Array.from(two['model/memory.assignments']!), Array.from(one['model/memory.assignments']!));
    assert.deepEqual(Array.from(two['model/memory.written_epoch']!), Array.from(one['model/memory.written_epoch']!));
    assert.ok(worstRelative(two, one) <= 1e-4, `worst relative difference ${worstRelative(two, one)}`);
  });
});

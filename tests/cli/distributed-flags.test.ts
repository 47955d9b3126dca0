import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { container } from 'tsyringe';
import { buildConfig } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { UserError } from '../../src/core/errors.js';
import { DdpStrategy } from '../../src/distributed/ddp.js';
import { checkRendezvousFlag } from '../../src/distributed/gloo.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { STRATEGY } from '../../src/trainer/strategy.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

/** Rank 0 of 2 whose collectives must never run (the checks come first). */
const twoRanks: ProcessGroup = {
  rank: 0,
  worldSize: 2,
  allReduce: () => assert.fail('no collective expected'),
  allGather: () => assert.fail('no collective expected'),
  reduceScatter: () => assert.fail('no collective expected'),
  broadcast: () => assert.fail('no collective expected'),
  barrier: () => assert.fail('no collective expected'),
  close: () => undefined,
};

describe('distributed flags', function () {
  this.timeout(60_000);

  it('--rendezvous: the four forms pass, anything else names the flag, the value and the forms', () => {
    for (const url of ['file:///shared/dir', 'tcp://node001:29500', 'redis://cache:6379/run-7', 'env://']) checkRendezvousFlag(url);
    assert.throws(
      () => checkRendezvousFlag('etcd://host:2379'),
      (e: Error) =>
        e instanceof UserError &&
        /^--rendezvous: "etcd:\/\/host:2379" is not allowed; expected file:\/\/\/shared\/dir, tcp:\/\/host:port, redis:\/\/host:port\[\/prefix\] or env:\/\//.test(
          e.message,
        ),
    );
    assert.throws(() => checkRendezvousFlag('tcp://host:0'), /--rendezvous: "tcp:\/\/host:0" is not allowed; expected a port number/);
    assert.throws(() => checkRendezvousFlag('file://relative/dir'), /--rendezvous: "file:\/\/relative\/dir" is not allowed/);
  });

  it('--drop-last false is refused on a worker of a 2-rank job too (torchrun-style launch), before any collective', async () => {
    const scope = container.createChildContainer();
    scope.registerInstance(STRATEGY, new DdpStrategy(twoRanks));
    const runDir = join(tempDir(), 'run');
    const config = buildConfig({
      dataset: 'synthetic',
      imageSize: 16,
      syntheticSize: 64,
      backbone: 'mlp',
      batchSize: 16,
      workers: 0,
      valEvery: 0,
      backend: 'cpu',
      dropLast: false,
      runDir,
      methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
    });
    await assert.rejects(
      runTraining(config, { container: scope, callbacks: [] }),
      (e: Error) => e instanceof UserError && /^--drop-last: false is not allowed; expected true with 2 ranks/.test(e.message),
    );
    assert.ok(!existsSync(runDir));
  });

  it('verify --gpus 1 without a GPU backend: the same one-line error, exit 2', () => {
    const { status, stderr } = runCli(['verify', ...SMOKE_FLAGS, '--gpus', '1'], 30_000);
    assert.equal(status, 2, stderr);
    assert.equal(stderr.trim().split('\n').length, 1, stderr);
    assert.match(stderr, /^ssl-train: error: --gpus: 1 needs the GPU backend .*; on CPU use --devices 1$/m);
  });
});

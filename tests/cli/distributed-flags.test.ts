import 'reflect-metadata';
import { strict as assert } from 'node:assert';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { container } from 'tsyringe';
import { buildConfig } from '../../src/experiment/config.js';
import { runTraining } from '../../src/experiment/train.js';
import { UserError } from '../../src/core/errors.js';
import { checkRendezvousFlag } from '../../src/distributed/gloo.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { PROCESS_GROUP } from '../../src/trainer/strategy.js';
import { runCli, SMOKE_FLAGS, tempDir } from '../helpers/run.js';

/** Rank 0 of 2 whose collectives must never run (the checks come first), nor its close (the caller's to close). */
const twoRanks: ProcessGroup = {
  rank: 0,
  worldSize: 2,
  allReduce: () => assert.fail('no collective expected'),
  allGather: () => assert.fail('no collective expected'),
  reduceScatter: () => assert.fail('no collective expected'),
  broadcast: () => assert.fail('no collective expected'),
  barrier: () => assert.fail('no collective expected'),
  close: () => assert.fail('the run closed a process group it did not create'),
};

/** A run's container whose PROCESS_GROUP is {@link twoRanks} (as a torchrun-style worker of a 2-rank job would get). */
function twoRankScope() {
  const scope = container.createChildContainer();
  scope.registerInstance(PROCESS_GROUP, twoRanks);
  return scope;
}

const SMOKE = {
  dataset: 'synthetic',
  imageSize: 16,
  syntheticSize: 64,
  backbone: 'mlp',
  batchSize: 16,
  workers: 0,
  valEvery: 0,
  backend: 'cpu',
  methodArgs: { projHiddenDim: 32, projOutputDim: 16 },
} as const;

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

  it('--drop-last false is refused on a worker of a 2-rank job too (torchrun-style launch: auto picks ddp over the injected group), before any collective', async () => {
    const runDir = join(tempDir(), 'run');
    await assert.rejects(
      runTraining(buildConfig({ ...SMOKE, dropLast: false, runDir }), { container: twoRankScope(), callbacks: [] }),
      (e: Error) => e instanceof UserError && /^--drop-last: false is not allowed; expected true with 2 ranks/.test(e.message),
    );
    assert.ok(!existsSync(runDir));
  });

  it('--strategy single on a worker of a 2-rank job is refused, before any collective', async () => {
    const runDir = join(tempDir(), 'run');
    await assert.rejects(
      runTraining(buildConfig({ ...SMOKE, strategy: 'single', runDir }), { container: twoRankScope(), callbacks: [] }),
      (e: Error) =>
        e instanceof UserError &&
        /^--strategy: "single" is not allowed; expected a strategy over all 2 ranks, e\.g\. ddp or auto \(single runs on 1\)$/.test(e.message),
    );
    assert.ok(!existsSync(runDir));
  });

  it('--devices 2 --strategy single: refused by the launching process with the same line, exit 2', () => {
    const { status, stderr } = runCli([...SMOKE_FLAGS, '--devices', '2', '--strategy', 'single'], 30_000);
    assert.equal(status, 2, stderr);
    assert.equal(stderr.trim().split('\n').length, 1, stderr);
    assert.match(
      stderr,
      /^ssl-train: error: --strategy: "single" is not allowed; expected a strategy over all 2 ranks, e\.g\. ddp or auto \(single runs on 1\)$/m,
    );
  });
});

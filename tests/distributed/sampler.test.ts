import { strict as assert } from 'node:assert';
import { epochPermutation, RandomSampler } from '../../src/data/sampler.js';
import { DistributedSampler } from '../../src/distributed/sampler.js';

describe('DistributedSampler', () => {
  for (const worldSize of [2, 3, 4]) {
    it(`W=${worldSize}: the ranks' b-th batches concatenated in rank order are the one-process b-th batch`, () => {
      const length = 103;
      const localBatch = 5;
      const single = new RandomSampler(length, 7).indices(2);
      const shards = Array.from({ length: worldSize }, (_, rank) => new DistributedSampler({ length, seed: 7, rank, worldSize, localBatch }).indices(2));
      const globalBatch = worldSize * localBatch;
      assert.equal(shards[0].length, Math.floor(length / globalBatch) * localBatch);
      for (let b = 0; b < shards[0].length / localBatch; b++) {
        const joined = shards.flatMap((s) => Array.from(s.subarray(b * localBatch, (b + 1) * localBatch)));
        assert.deepEqual(joined, Array.from(single.subarray(b * globalBatch, (b + 1) * globalBatch)));
      }
    });
  }

  it('gives every rank the same count, wrapping around to fill the last batch without dropLast', () => {
    const shards = [0, 1, 2].map((rank) => new DistributedSampler({ length: 10, seed: 1, rank, worldSize: 3, localBatch: 2, dropLast: false }));
    assert.ok(shards.every((s) => s.length === 4));
    const p = epochPermutation(10, 1, 0);
    assert.deepEqual(Array.from(shards[2].indices(0)), [p[4], p[5], p[10 % 10], p[11 % 10]]);
  });

  it('reshuffles per epoch and rejects bad ranks and batches', () => {
    const s = new DistributedSampler({ length: 64, seed: 3, rank: 1, worldSize: 2, localBatch: 8 });
    assert.notDeepEqual(Array.from(s.indices(0)), Array.from(s.indices(1)));
    assert.throws(() => new DistributedSampler({ length: 64, seed: 3, rank: 2, worldSize: 2, localBatch: 8 }), /rank: 2 is not allowed/);
    assert.throws(
      () => new DistributedSampler({ length: 10, seed: 3, rank: 0, worldSize: 2, localBatch: 8 }),
      /--batch-size: 16 is not allowed; expected at most the training set size 10/,
    );
  });
});

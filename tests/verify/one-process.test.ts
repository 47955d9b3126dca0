/**
 * verify's one-process runs spread over the ranks (src/verify/one-process.ts): the message
 * format carries every bit, every run has one owner, and where the runs take place does not
 * change a single bit of what verify measures.
 */
import { strict as assert } from 'node:assert';
import { packMessage, unpackMessage } from '../../src/verify/messages.js';
import { ONE_PROCESS_RUNS, runsOfRank } from '../../src/verify/one-process.js';
import { runCli } from '../helpers/run.js';

describe('verify: one-process runs over the ranks', function () {
  this.timeout(120_000);

  it('packMessage / unpackMessage carry the header and every bit of float32 and int32 arrays (NaN payloads, -0, int32s whose bits are NaNs)', () => {
    const nanPayload = new Float32Array(new Uint32Array([0x7fc01234]).buffer)[0]!;
    const floats = Float32Array.of(1.5, -0, Infinity, -Infinity, nanPayload, 1e-45, 3.4028234663852886e38);
    const ints = Int32Array.of(-1, 0x7fc01234, -2147483648, 2147483647, 0);
    const header = { name: 'é, a header of odd byte length', n: 3, nested: [1, { k: true }] };
    const { header: back, arrays } = unpackMessage<typeof header>(packMessage(header, [floats, new Float32Array(0), ints]));
    assert.deepEqual(back, header);
    assert.equal(arrays.length, 3);
    assert.ok(arrays[0] instanceof Float32Array && arrays[2] instanceof Int32Array);
    assert.deepEqual(new Uint32Array(arrays[0].buffer, arrays[0].byteOffset, arrays[0].length), new Uint32Array(floats.buffer));
    assert.equal(arrays[1]!.length, 0);
    assert.deepEqual(Array.from(arrays[2]), Array.from(ints));
  });

  it('runsOfRank gives each of the reference and its twins one rank, the reference rank 0, and no rank more than ceil(runs / W)', () => {
    for (let W = 1; W <= 7; W++) {
      const owned = Array.from({ length: W }, (_, r) => runsOfRank(r, W));
      assert.deepEqual(runsOfRank(0, 1), [0, 1, 2, 3, 4], 'spread 1 (the default): rank 0 runs all');
      assert.deepEqual(
        owned.flat().sort(),
        Array.from({ length: ONE_PROCESS_RUNS }, (_, j) => j),
      );
      assert.ok(owned[0]!.includes(0));
      assert.ok(owned.every((runs) => runs.length <= Math.ceil(ONE_PROCESS_RUNS / W)));
    }
  });

  it("step 1's bounds (the reference's and its twins' spread) are the same on rank 0 alone and spread over 2 and 3 ranks (--one-process-ranks; to the printed digits)", () => {
    // SwAV with its queue from the first step: float and int32 state (bank, pointer) travel too.
    // On 3 ranks, every one-process run starts from the same state and replays the same W-rank
    // decisions and ReLU branches whichever rank runs it, so its results may not depend on
    // which rank ran them. One thread per rank.
    const args = [
      'verify',
      '--method',
      'swav',
      '--backbone',
      'mlp',
      '--dataset',
      'synthetic',
      '--image-size',
      '8',
      '--synthetic-size',
      '48',
      '--batch-size',
      '12',
      '--workers',
      '0',
      '--val-every',
      '0',
      '--steps',
      '1',
      '--crops',
      '2x8:0.2-1',
      '--tolerance',
      '1e-30',
      ...['projHiddenDim=16', 'projOutputDim=8', 'numPrototypes=10', 'queueSize=24', 'epochQueueStarts=0', 'freezePrototypesEpochs=0'].flatMap((a) => [
        '--method-arg',
        a,
      ]),
    ];
    const bounds = [1, 2, 3].map((spread) => {
      const { stdout, stderr } = runCli([...args, '--devices', '3', '--one-process-ranks', String(spread)], 100_000, { SSL_ZOO_NUM_THREADS: '1' });
      const row = stdout.split('\n').find((l) => l.startsWith('1 '));
      assert.ok(row, `spread ${spread}: no step-1 row\n${stdout}${stderr}`);
      // The cells are `difference / bound`; keep the bounds (loss, gradients, parameters, queues;
      // then the ReLU branches' margin / bound when a branch switched).
      const cells = [...row.matchAll(/\S+ \/ (\S+)/g)].map((m) => m[1]!);
      assert.ok(cells.length >= 4, `spread ${spread}: ${row}`);
      assert.match(row, / \d+\/[1-9]\d* switched/, `spread ${spread}: the ReLU branches near zero are recorded and replayed: ${row}`);
      return cells;
    });
    assert.ok(
      bounds[0]!.some((b) => Number(b) > 1e-20),
      `the bounds are measured, not the floor: ${bounds[0]}`,
    );
    assert.deepEqual(bounds[1], bounds[0]);
    assert.deepEqual(bounds[2], bounds[0]);
  });

  it('--one-process-ranks other than an integer >= 1 is one line, exit 2', () => {
    const { status, stderr } = runCli(['verify', '--method', 'simclr', '--backbone', 'mlp', '--dataset', 'synthetic', '--one-process-ranks', '0']);
    assert.equal(status, 2, stderr);
    assert.equal(stderr.trim(), 'ssl-train: error: --one-process-ranks: 0 is not allowed; expected an integer >= 1');
  });
});

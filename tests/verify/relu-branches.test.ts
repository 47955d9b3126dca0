/**
 * verify's ReLU branches (src/verify/relu-branches.ts): recording leaves the gradient as it was,
 * a replayed branch is the gradient's branch at that entry, the ranks' entries map to the global
 * batch (views concatenated along the batch, a twin's sample order), and a switched branch is
 * legitimate within the twins' round-off and a failure beyond it.
 */
import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { formatVerifyResult } from '../../src/verify/report.js';
import { oneStepResult } from './results.js';
import {
  BranchRecorder,
  BranchReplayer,
  compareBranches,
  installBranchWatch,
  NEAR_ZERO,
  replayEntries,
  uninstallBranchWatch,
  watchBranches,
  type GatheredBranches,
  type ReplayedBranches,
} from '../../src/verify/relu-branches.js';

/** d/dx of Σ w·relu(x) (w: fixed weights, so the gradient shows each entry's branch), read back. */
function reluGradient(x: number[], shape = [x.length]): Promise<Float32Array> {
  const weights = x.map((_, i) => i + 1);
  const g = tf.grad((t: Tensor) => tf.sum(tf.mul(tf.relu(t), tf.tensor(weights, shape))))(tf.tensor(x, shape));
  return g.data<'float32'>().then((d) => (g.dispose(), Float32Array.from(d)));
}

describe('verify: ReLU branches', () => {
  before(async () => {
    await initEngine('cpu');
    installBranchWatch();
  });
  after(() => uninstallBranchWatch());

  it('the W-rank recorder leaves the gradient bit for bit and records the inputs within NEAR_ZERO of zero with their branches', async () => {
    // 3 · 2^-12 is the threshold itself (recorded), 7.4e-4 just above it (not).
    const x = [1e-9, 2, -3, -5e-4, 7e-4, -1e-9, -3 * NEAR_ZERO, 7.4e-4];
    const tensors = () => tf.memory().numTensors;
    const t0 = tensors();
    const plain = await reluGradient(x);
    const plainLeft = tensors() - t0; // the helper's inputs
    const recorder = new BranchRecorder();
    const watched = await watchBranches(recorder, () => reluGradient(x));
    assert.deepEqual(watched, plain);
    assert.deepEqual(Array.from(plain), [1, 2, 0, 0, 5, 0, 0, 8]);
    const [call] = await recorder.takeStep();
    // |x| <= 3 · 2^-12 ≈ 7.32e-4: entries 0, 3, 4, 5 and 6.
    assert.ok(7e-4 <= 3 * NEAR_ZERO && 3 * NEAR_ZERO < 7.4e-4);
    assert.deepEqual(call!.shape, [8]);
    assert.deepEqual(Array.from(call!.index), [0, 3, 4, 5, 6]);
    assert.deepEqual(Array.from(call!.taken), [1, 0, 1, 0, 0]);
    assert.deepEqual(await recorder.takeStep(), []);
    assert.equal(tensors() - t0, 2 * plainLeft, 'the recorder released the input it read');
  });

  it("a replayer takes the W-rank run's branch at its entries (and its own elsewhere) and reads its inputs there", async () => {
    const ranks: GatheredBranches = { ranks: [[{ shape: [4], index: Int32Array.of(0, 3), taken: Float32Array.of(1, 0) }]], localBatch: 4 };
    const replayer = new BranchReplayer(ranks);
    // Entry 0 is -1e-9 here (own branch 0), the W-rank run took 1; entry 3 agrees; 1 and 2 are this run's own.
    const g = await watchBranches(replayer, () => reluGradient([-1e-9, 2, -3, -2e-9], [4]));
    assert.deepEqual(Array.from(g), [1, 2, 0, 0]);
    const read = await replayer.takeStep();
    assert.equal(read.unmatched, false);
    assert.deepEqual(Array.from(read.at[0]!), [-1e-9, -2e-9].map(Math.fround));
    assert.deepEqual(read.scale, [3]);
    assert.deepEqual(Array.from(read.taken[0]!), [1, 0]);
  });

  it("maps every rank's entries to the global batch: global inputs from rank 0, V view blocks of the local batch, a twin's sample order", () => {
    // 2 ranks of 2 samples (N = 4), rows of 3 values; rank r's entries at (row, column).
    const at = (row: number, col: number) => row * 3 + col;
    const gathered: GatheredBranches = {
      ranks: [
        [
          { shape: [4, 3], index: Int32Array.of(at(0, 1), at(3, 2)), taken: Float32Array.of(1, 0) },
          { shape: [5], index: Int32Array.of(2), taken: Float32Array.of(1) },
        ],
        [
          { shape: [4, 3], index: Int32Array.of(at(1, 0), at(2, 2)), taken: Float32Array.of(0, 1) },
          { shape: [5], index: Int32Array.of(2), taken: Float32Array.of(1) },
        ],
      ],
      localBatch: 2,
    };
    // Two views a rank ([v0 s0, v0 s1, v1 s0, v1 s1]): the reference's rows are [v0 of samples 0-3, v1 of samples 0-3].
    const reference = replayEntries(gathered, 0, [8, 3])!;
    assert.deepEqual(Array.from(reference.index), [at(0, 1), at(4 + 1, 2), at(3, 0), at(4 + 2, 2)]);
    assert.deepEqual(Array.from(reference.taken), [1, 0, 0, 1]);
    // A twin whose row i is global sample order[i].
    const order = Int32Array.of(2, 0, 3, 1);
    const twin = replayEntries(gathered, 0, [8, 3], order)!;
    assert.deepEqual(Array.from(twin.index), [at(1, 1), at(4 + 3, 2), at(2, 0), at(4 + 0, 2)]);
    // Same shape everywhere: a global input, rank 0's entries, in any sample order.
    assert.deepEqual(Array.from(replayEntries(gathered, 1, [5], order)!.index), [2]);
    // Shapes that do not map.
    assert.equal(replayEntries(gathered, 0, [6, 3]), undefined);
    assert.equal(replayEntries(gathered, 0, [8, 4]), undefined);
    assert.equal(replayEntries(gathered, 2, [5]), undefined);
  });

  it('a switch within the twins’ round-off is legitimate, one far beyond it is a failure, and the verdict names it', () => {
    const gathered: GatheredBranches = { ranks: [[{ shape: [4], index: Int32Array.of(0, 1), taken: Float32Array.of(1, 1) }]], localBatch: 4 };
    const run = (at: number[]): ReplayedBranches => ({ at: [Float32Array.from(at)], scale: [2], taken: [Float32Array.of(1, 1)], unmatched: false });
    // Entry 0: the reference's own input is -1e-8 (a switch, margin 5e-9 of the scale), the twins' differ by up to 4e-8 (2e-8 of it).
    const within = compareBranches(gathered, run([-1e-8, 3e-4]), [run([3e-8, 3e-4]), run([-1e-8, 3e-4])], 4, 0)!;
    assert.equal(within.differ, 1);
    assert.equal(within.beyond, 0);
    assert.ok(Math.abs(within.bound - 8e-8) < 1e-12, `bound ${within.bound}`);
    // The W-rank run took entry 1's branch 1 where the reference's input is -0.5: margin 0.25, far beyond.
    const wrong = compareBranches(gathered, run([-1e-8, -0.5]), [run([3e-8, -0.5])], 4, 1e-5)!;
    assert.equal(wrong.differ, 2);
    assert.equal(wrong.beyond, 1);
    assert.equal(wrong.largestMargin, 0.25);
    assert.deepEqual(
      wrong.switches.map((s) => s.entry),
      [0, 1],
    );
    const unmatched = compareBranches(gathered, { ...run([0, 0]), unmatched: true }, [run([0, 0])], 4, 1e-5)!;
    assert.equal(unmatched.matched, false);
    const result = oneStepResult({ branches: wrong }, wrong.largestMargin / wrong.bound);
    const text = formatVerifyResult(result, 'byol');
    assert.match(text, /^1 .* 2\/2 switched, 2\.50e-1 \/ 1\.00e-5 /m);
    assert.match(
      text.split('\n').at(-1)!,
      /^FAILED: the worst difference is [0-9.]+ of its bound: 1 ReLU branch\(es\) switched by up to 2\.5e-1, beyond round-off 1\.0e-5$/,
    );
  });
});

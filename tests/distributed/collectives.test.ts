/**
 * Gradients of the differentiable collectives with real processes (docs/design.md contract 3):
 * the worked all-reduce example, and allGather's gradient for a non-symmetric per-rank loss
 * against a one-process reference computed here.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type Tensor, tf } from '../../src/core/tf.js';
import { allGather, allReduceSum } from '../../src/distributed/collectives.js';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { SingleProcessGroup } from '../../src/core/process-group.js';
import { type GatherProblem, problemData, rankLoss } from './fixtures.js';
import { expectAllOk, freshDir, relativeError, runRanks } from './helpers.js';
import { seededFloats } from './io.js';

interface GatherResult {
  gradE: number[];
  gradTheta: number[];
  loss: number;
  leaked: number;
}

/**
 * One-process reference: with E = X θ for the full batch X [N, inDim],
 * - ∂(Σ_r loss_r)/∂E, whose rows r·B.. are what rank r must get for its embeddings;
 * - ∂L/∂θ for the global mean loss L = (1/W) Σ_r loss_r (what DDP must produce);
 * - the biased "local slice" answer ∂loss_r/∂E_r (rank r's own loss only), to show the
 *   check can tell them apart.
 */
function reference(p: GatherProblem) {
  const { inputs, weights, theta } = problemData(p, seededFloats);
  const W = p.worldSize;
  const B = p.batch;
  return tf.tidy(() => {
    const X = tf.concat(
      inputs.map((x) => tf.tensor2d(x, [B, p.inDim])),
      0,
    );
    const th = tf.tensor2d(theta, [p.inDim, p.outDim]);
    const w = weights.map((v) => tf.tensor1d(v));
    const lossSum = (E: Tensor) => {
      const losses = Array.from({ length: W }, (_, r) => rankLoss(tf.slice(E, [r * B, 0], [B, -1]), E, r, W, w[r]!));
      return tf.addN(losses) as tf.Scalar;
    };
    const E = tf.matMul(X, th);
    const gradE = tf.grad(lossSum)(E).arraySync() as number[][];
    const gradTheta = tf
      .grad((t: Tensor) => tf.div(lossSum(tf.matMul(X, t)), W) as tf.Scalar)(th)
      .dataSync();
    const losses = Array.from({ length: W }, (_, r) => {
      const Er = tf.slice(E, [r * B, 0], [B, -1]);
      return rankLoss(Er, E, r, W, w[r]!).dataSync()[0]!;
    });
    // Biased variant: only rank r's own loss, through both its anchors and its gathered rows.
    const localOnly = Array.from({ length: W }, (_, r) => {
      const others = E; // treated as constants except rows of rank r
      const f = (Er: Tensor) => {
        const all = tf.concat([tf.slice(others, [0, 0], [r * B, -1]), Er, tf.slice(others, [(r + 1) * B, 0], [-1, -1])], 0);
        return rankLoss(Er, all, r, W, w[r]!);
      };
      return Array.from(
        tf
          .grad(f)(tf.slice(E, [r * B, 0], [B, -1]))
          .dataSync(),
      );
    });
    return {
      gradE: Array.from({ length: W }, (_, r) => gradE.slice(r * B, (r + 1) * B).flat()),
      gradTheta: Array.from(gradTheta),
      losses,
      localOnly,
    };
  });
}

describe('distributed/collectives: differentiable collectives (real processes)', function () {
  this.timeout(90_000);

  before(() => {
    loadGlooAddon();
  });

  it("docs/design.md's worked example: allReduceSum backward is an all-reduce SUM (10 and 15, not 4 and 9)", async () => {
    const dir = freshDir('grad-worked');
    try {
      const outcomes = await runRanks('gradients', {
        dir,
        worldSize: 2,
        rendezvous: pathToFileURL(join(dir, 'store')).href,
        timeoutMs: 20_000,
        scenario: 'worked-example',
      });
      expectAllOk(outcomes);
      const results = outcomes.map((o) => o.result as { grad: number; rawGrad: number; y: number });
      assert.deepEqual(
        results.map((r) => r.grad),
        [10, 15],
      );
      assert.deepEqual(
        results.map((r) => r.rawGrad),
        [4, 9],
      );
      // Forward: s = 2 + 3 = 5 on both ranks, y = (r+2)·5.
      assert.deepEqual(
        results.map((r) => r.y),
        [10, 15],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const W of [2, 3]) {
    it(`allGather backward (reduce-scatter SUM) gives the one-process gradient of the global loss, W=${W}`, async () => {
      const problem: GatherProblem = { worldSize: W, batch: 4, inDim: 6, outDim: 5, seed: 17 + W };
      const dir = freshDir(`grad-gather-w${W}`);
      try {
        const outcomes = await runRanks('gradients', {
          dir,
          worldSize: W,
          rendezvous: pathToFileURL(join(dir, 'store')).href,
          timeoutMs: 20_000,
          scenario: 'gather',
          problem,
        });
        expectAllOk(outcomes);
        const ref = reference(problem);
        for (const o of outcomes) {
          const res = o.result as GatherResult;
          const r = o.rank;
          assert.ok(Math.abs(res.loss - ref.losses[r]!) <= 1e-5 * Math.abs(ref.losses[r]!), `rank ${r} loss`);
          const err = relativeError(res.gradE, ref.gradE[r]!);
          assert.ok(err < 1e-5, `rank ${r}: ∂loss/∂E_r off by ${err}`);
          // The check is sensitive: the biased local-slice gradient is far off.
          assert.ok(relativeError(ref.localOnly[r]!, ref.gradE[r]!) > 1e-2, `rank ${r}: local-only variant too close`);
          const errTheta = relativeError(res.gradTheta, ref.gradTheta);
          assert.ok(errTheta < 1e-5, `rank ${r}: DDP-averaged ∂L/∂θ off by ${errTheta}`);
          assert.equal(res.leaked, 0, `rank ${r}: tensors leaked by allGather's forward/backward`);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }

  it('with no group or one process they are the identity, gradient included', () => {
    const x = tf.tensor2d([
      [1, 2],
      [3, 4],
    ]);
    for (const group of [undefined, new SingleProcessGroup()]) {
      const g = tf.grad((v: Tensor) => tf.sum(tf.mul(allGather(v, group), allReduceSum(v, group))))(x);
      assert.deepEqual(g.arraySync(), [
        [2, 4],
        [6, 8],
      ]);
    }
  });

  it('rejects non-float32 tensors', () => {
    const fake = { rank: 0, worldSize: 2 } as unknown as SingleProcessGroup;
    assert.throws(() => allReduceSum(tf.tensor1d([1, 2], 'int32'), fake), /expected a float32 tensor, got int32/);
  });
});

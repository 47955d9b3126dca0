/**
 * SyncIterNorm with W real processes over the Gloo addon, DIFFERENT rows per rank: output,
 * input gradient, summed parameter gradients and running statistics equal IterNorm on the
 * concatenated batch (relative 1e-4 of the largest entry: Newton-Schulz in float32), W = 2
 * and 3; a plain IterNorm on each rank's rows (per-rank statistics) does not.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { IterNorm, type IterNormOptions } from '../../src/core/iter-norm.js';
import { tf, type Tensor } from '../../src/core/tf.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import { iterNormProblem, type IterNormProblem } from './workers/sync-iter-norm-problem.js';
import type { SyncIterNormResult } from './workers/sync-iter-norm.js';

const TOL = 1e-4;
const OPTIONS: IterNormOptions = { numGroups: 3, iterations: 5 };

/** max |a − b| / max |full| (b may be a slice of full). */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>, full: ArrayLike<number> = b): number {
  assert.equal(a.length, b.length);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  for (let i = 0; i < full.length; i++) scale = Math.max(scale, Math.abs(full[i]!));
  return Number.isNaN(diff) ? Infinity : diff / scale;
}

/** IterNorm on the global batch with loss Σ y ⊙ u: the one-process truth. */
function reference(p: IterNormProblem) {
  const layer = new IterNorm(p.features, OPTIONS);
  const { x, upstream } = iterNormProblem(p);
  const input = tf.variable(x);
  let y: Tensor | undefined;
  const { grads } = tf.variableGrads(() => {
    y = tf.keep(layer.forward(input));
    return tf.sum(tf.mul(y, upstream));
  }, [input, layer.weight!, layer.bias!]);
  return {
    y: Array.from(y!.dataSync()),
    xGrad: Array.from(grads[input.name]!.dataSync()),
    weightGrad: Array.from(grads[layer.weight!.name]!.dataSync()),
    biasGrad: Array.from(grads[layer.bias!.name]!.dataSync()),
    runningMean: Array.from(layer.runningMean.dataSync()),
    runningWm: Array.from(layer.runningWm.dataSync()),
  };
}

describe('distributed/SyncIterNorm (real processes, different rows per rank)', function () {
  this.timeout(120_000);

  for (const W of [2, 3]) {
    it(`W = ${W}: output, input gradient, summed parameter gradients and running statistics equal IterNorm on the concatenated batch; per-rank IterNorm does not`, async () => {
      const problem: IterNormProblem = { batch: 12 * W, features: 12, seed: 40 + W };
      const dir = freshDir(`synciternorm-w${W}`);
      let results: SyncIterNormResult[];
      try {
        const outcomes = await runRanks(
          'sync-iter-norm',
          { dir, worldSize: W, rendezvous: pathToFileURL(join(dir, 'store')).href, timeoutMs: 30_000, problem, options: OPTIONS },
          90_000,
        );
        expectAllOk(outcomes);
        results = outcomes.map((o) => o.result as SyncIterNormResult);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      const ref = reference(problem);
      const n = ref.y.length / W;
      const sum = (k: 'weightGrad' | 'biasGrad') => ref[k].map((_, i) => results.reduce((s, r) => s + r[k][i]!, 0));
      results.forEach((m, r) => {
        const rows = (a: number[]) => a.slice(r * n, (r + 1) * n);
        assert.ok(relErr(m.y, rows(ref.y), ref.y) <= TOL, `rank ${r}: output error ${relErr(m.y, rows(ref.y), ref.y)}`);
        assert.ok(relErr(m.xGrad, rows(ref.xGrad), ref.xGrad) <= TOL, `rank ${r}: input gradient error ${relErr(m.xGrad, rows(ref.xGrad), ref.xGrad)}`);
        assert.ok(relErr(m.runningMean, ref.runningMean) <= TOL && relErr(m.runningWm, ref.runningWm) <= TOL, `rank ${r}: running statistics`);
        // Negative control: per-rank statistics give another output.
        assert.ok(relErr(m.localY, rows(ref.y), ref.y) > 1e-2, `rank ${r}: per-rank IterNorm matched (${relErr(m.localY, rows(ref.y), ref.y)})`);
      });
      assert.ok(relErr(sum('weightGrad'), ref.weightGrad) <= TOL, 'weight gradient (summed over ranks)');
      assert.ok(relErr(sum('biasGrad'), ref.biasGrad) <= TOL, 'bias gradient (summed over ranks)');
    });
  }
});

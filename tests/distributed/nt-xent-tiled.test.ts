/**
 * The tiled NT-Xent with W = 2, 3 real processes over the Gloo addon, DIFFERENT data per rank:
 * on every rank, the tiled loss's value and gradients w.r.t. its local z1, z2 equal the plain
 * loss's (relative 1e-5 of the largest entry), and its gradient / W equals the one-process
 * gradient of the global loss on those rows (the scale convention of
 * src/distributed/collectives.ts: reduce-scatter SUM in the gather's backward). Tile sizes
 * that do not divide B or N, and tiles smaller and larger than a rank's block, put the self and
 * positive columns (at the rank offsets) in every position of a tile.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { tf, type Tensor } from '../../src/core/tf.js';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { ntXentLoss } from '../../src/losses/index.js';
import { expectAllOk, freshDir, relativeError, runRanks } from './helpers.js';
import { globalViews, type TiledProblem } from './workers/nt-xent-tiled-problems.js';
import type { TiledWorkerResult } from './workers/nt-xent-tiled.js';

const TOL = 1e-5;

const PROBLEMS: TiledProblem[] = [
  { localBatch: 5, dim: 6, temperature: 0.1, tileSize: 3, seed: 1 },
  { localBatch: 8, dim: 4, temperature: 0.5, tileSize: 5, seed: 2 },
  { localBatch: 4, dim: 9, temperature: 0.07, tileSize: 1, seed: 3 },
  { localBatch: 7, dim: 5, temperature: 0.2, tileSize: 16, seed: 4 },
];

/** One process on the global batch: value and gradients w.r.t. all N rows of z1, z2. */
function globalReference(p: TiledProblem, worldSize: number): { value: number; g1: Float32Array; g2: Float32Array } {
  const [z1, z2] = globalViews(p, worldSize);
  const { value, grads } = tf.valueAndGrads((a: Tensor, c: Tensor) =>
    ntXentLoss(a as tf.Tensor2D, c as tf.Tensor2D, { temperature: p.temperature, tiled: false }),
  )([z1, z2]);
  const out = {
    value: value.dataSync()[0]!,
    g1: grads[0]!.dataSync() as Float32Array,
    g2: grads[1]!.dataSync() as Float32Array,
  };
  tf.dispose([value, ...grads, z1, z2]);
  return out;
}

describe('distributed/ntXentLossTiled: W real processes, per-rank values and gradients equal the plain loss', function () {
  this.timeout(120_000);

  before(() => {
    loadGlooAddon();
  });

  for (const W of [2, 3]) {
    describe(`W = ${W}`, () => {
      let results: TiledWorkerResult[] = [];

      before(async () => {
        const dir = freshDir(`nt-xent-tiled-w${W}`);
        try {
          const outcomes = await runRanks(
            'nt-xent-tiled',
            { dir, worldSize: W, rendezvous: pathToFileURL(join(dir, 'store')).href, timeoutMs: 30_000, problems: PROBLEMS },
            90_000,
          );
          expectAllOk(outcomes);
          results = outcomes.map((o) => o.result as TiledWorkerResult);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });

      PROBLEMS.forEach((p, k) => {
        it(`B=${p.localBatch} D=${p.dim} τ=${p.temperature} tile=${p.tileSize}: tiled = plain on every rank, and = the global loss`, () => {
          const ref = globalReference(p, W);
          const rowLen = p.localBatch * p.dim;
          const values: number[] = [];
          results.forEach((res, r) => {
            const { plain, tiled } = res.answers[k]!;
            const label = `rank ${r}`;
            assert.ok(Math.abs(tiled.value - plain.value) <= TOL * Math.max(1, Math.abs(plain.value)), `${label}: value ${tiled.value} vs ${plain.value}`);
            assert.ok(relativeError(tiled.g1, plain.g1) <= TOL, `${label}: dz1 vs plain ${relativeError(tiled.g1, plain.g1)}`);
            assert.ok(relativeError(tiled.g2, plain.g2) <= TOL, `${label}: dz2 vs plain ${relativeError(tiled.g2, plain.g2)}`);
            // Against one process on the global batch: rank r's gradient on its rows is W × the
            // global loss's (reduce-scatter SUM; DDP's averaging divides it back out).
            const slice = (g: Float32Array) => Array.from(g.slice(r * rowLen, (r + 1) * rowLen));
            const e1 = relativeError(
              tiled.g1.map((x) => x / W),
              slice(ref.g1),
            );
            const e2 = relativeError(
              tiled.g2.map((x) => x / W),
              slice(ref.g2),
            );
            assert.ok(e1 <= TOL && e2 <= TOL, `${label}: gradient / W vs global loss: ${e1}, ${e2}`);
            values.push(tiled.value);
          });
          // Different data per rank: different per-rank losses, whose mean is the global loss.
          assert.equal(new Set(values).size, W, `per-rank losses ${values}`);
          const mean = values.reduce((a, b) => a + b, 0) / W;
          assert.ok(Math.abs(mean - ref.value) <= TOL * Math.abs(ref.value), `mean ${mean} vs global ${ref.value}`);
        });
      });

      it('leaks no tensors on any rank', () => {
        results.forEach((res, r) => assert.equal(res.leaked, 0, `rank ${r} leaked ${res.leaked}`));
      });
    });
  }
});

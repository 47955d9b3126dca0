/**
 * The zoo losses (MoCo v2+, MoCo v3, SimSiam, NNCLR, SupCon, ReSSL, DCL, DCLW) with W = 2 and
 * 3 real processes over the Gloo addon, DIFFERENT data per rank: rank r holds rows r·B.. of
 * the sharded inputs of each float64 PyTorch reference file (tests/fixtures/losses/zoo-*.json)
 * and all of the unsharded ones (the queues).
 *
 * For every loss and W: each rank's loss equals the file's per-rank loss, the mean over ranks
 * equals the global loss, and each rank's gradient on its local rows divided by W equals the
 * rows of the global gradient (all to 1e-5, gradients relative to the largest reference
 * entry); detached and constant inputs get exactly zero on every rank; the number of
 * collectives is the one the doc comments state. Negative controls: the same check rejects
 * NNCLR with its targets at i instead of rank·B + i, and DCLW with lightly's local softmax.
 * Also gatherConstantRows (rank order, int32 labels exact, zero gradient) and no leaked tensors.
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { checkRanks as check, loadZooCase, ZOO_LOSSES, zooFixturePath, type ZooLoss, type ZooRankResult } from '../losses/zoo-cases.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import { WRONG_VARIANT_OF, ZOO_WRONG_VARIANTS } from './workers/zoo-loss-problems.js';
import type { CollectiveCounts } from './workers/counting.js';
import type { ZooLossesWorkerResult } from './workers/zoo-losses.js';

const TOL = 1e-5;

/** Collectives per rank and loss, forward and backward together, as the doc comments state. */
const EXPECTED_COLLECTIVES: Record<ZooLoss, Pick<CollectiveCounts, 'allGather' | 'reduceScatter'>> = {
  moco: { allGather: 0, reduceScatter: 0 },
  mocov3: { allGather: 1, reduceScatter: 0 },
  simsiam: { allGather: 0, reduceScatter: 0 },
  nnclr: { allGather: 1, reduceScatter: 1 },
  supcon: { allGather: 2, reduceScatter: 1 },
  ressl: { allGather: 0, reduceScatter: 0 },
  dcl: { allGather: 2, reduceScatter: 2 },
  dclw: { allGather: 3, reduceScatter: 2 },
};

describe('distributed/zoo-losses: every zoo loss with W real processes equals the float64 global loss', function () {
  this.timeout(120_000);

  before(() => {
    loadGlooAddon();
  });

  for (const W of [2, 3]) {
    describe(`W = ${W}`, () => {
      let outcomes: ZooLossesWorkerResult[] = [];

      before(async () => {
        const dir = freshDir(`zoo-losses-w${W}`);
        try {
          const raw = await runRanks(
            'zoo-losses',
            {
              dir,
              worldSize: W,
              rendezvous: pathToFileURL(join(dir, 'store')).href,
              timeoutMs: 30_000,
              losses: [...ZOO_LOSSES],
              variants: [...ZOO_WRONG_VARIANTS],
            },
            90_000,
          );
          expectAllOk(raw);
          outcomes = raw.map((o) => o.result as ZooLossesWorkerResult);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });

      for (const loss of ZOO_LOSSES) {
        it(`${loss}: per-rank losses, their mean and the local-row gradients / W match the reference (1e-5)`, () => {
          const c = loadZooCase(zooFixturePath(loss));
          const results = outcomes.map((o) => o.losses[loss]!);
          const e = check(c, results);
          assert.ok(e.rankLoss <= TOL, `${loss}: per-rank loss error ${e.rankLoss}`);
          assert.ok(e.meanLoss <= TOL, `${loss}: mean of per-rank losses vs global loss ${e.meanLoss}`);
          assert.ok(e.grad <= TOL, `${loss}: local-row gradient error ${e.grad}`);
          assert.deepEqual(e.nonZeroDetached, [], `${loss}: detached inputs with a non-zero gradient`);
          const values = results.map((r) => r.value);
          assert.equal(new Set(values).size, W, `${loss}: different data per rank should give different losses: ${values}`);
          for (const res of results) {
            const { allGather, reduceScatter, allReduce, broadcast } = (res as ZooRankResult & { collectives: CollectiveCounts }).collectives;
            assert.deepEqual({ allGather, reduceScatter }, EXPECTED_COLLECTIVES[loss], `${loss}: collectives`);
            assert.equal(allReduce + broadcast, 0);
          }
        });
      }

      it('negative controls: the same check rejects NNCLR with targets at i and DCLW with the local softmax', () => {
        for (const v of ZOO_WRONG_VARIANTS) {
          const c = loadZooCase(zooFixturePath(WRONG_VARIANT_OF[v]));
          const e = check(
            c,
            outcomes.map((o) => o.variants[v]!),
          );
          assert.ok(e.rankLoss > 1e-2, `${v}: per-rank losses should be off: ${JSON.stringify(e)}`);
          assert.ok(Math.max(e.meanLoss, e.grad) > 1e-2, `${v} not caught: ${JSON.stringify(e)}`);
        }
      });

      it('gatherConstantRows: rows of every rank in rank order, int32 labels exact, zero gradient', () => {
        const floats: number[] = [];
        const ints: number[] = [];
        for (let r = 0; r < W; r++) {
          floats.push(100 * r, 100 * r + 1, 100 * r + 2, 100 * r + 10, 100 * r + 11, 100 * r + 12);
          ints.push(10 * r, 10 * r + 1);
        }
        for (const o of outcomes) {
          assert.deepEqual(o.constantRows.floats, floats);
          assert.deepEqual(o.constantRows.ints, ints);
          assert.equal(o.constantRows.intDtype, 'int32');
          assert.deepEqual(o.constantRows.grad, [0, 0, 0, 0, 0, 0]);
        }
      });

      it('allocates no tensors it does not free (every loss and control, forward and backward)', () => {
        outcomes.forEach((o, r) => assert.equal(o.leaked, 0, `rank ${r} leaked ${o.leaked} tensors`));
      });
    });
  }
});

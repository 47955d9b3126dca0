/**
 * The zoo2 losses (SwAV with Sinkhorn-Knopp, without and with a queue; DINO with its centre;
 * MAE; W-MSE; VIbCReg; All4One's feature term) with W = 2 and 3 real processes over the Gloo
 * addon, DIFFERENT data per rank: rank r holds rows r·B.. of the sharded inputs of each float64
 * PyTorch reference file (tests/fixtures/losses/zoo2-*.json) and all of the unsharded ones
 * (queues, the centre, W-MSE's permutations).
 *
 * For every case and W: each rank's loss equals the file's per-rank loss, the mean over ranks
 * equals the global loss, each rank's gradient on its local rows divided by W equals the rows
 * of the global gradient, and each rank's outputs equal the global ones (its rows of the
 * Sinkhorn assignments, the one-process DINO centre), all to 1e-5 (gradients and outputs
 * relative to the largest reference entry); detached and constant inputs get exactly zero on
 * every rank; the collectives are the ones the doc comments state. Negative controls: the same
 * check rejects each loss with its global statistic taken over the local batch (a per-rank
 * Sinkhorn, DINO centre, MAE mean, W-MSE whitening, VIbCReg and All4One statistics).
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadGlooAddon } from '../../src/distributed/gloo.js';
import { checkRanks, type RankCheckErrors } from '../losses/zoo-cases.js';
import { loadZoo2Case, ZOO2_LOSSES, zoo2FixturePath, type Zoo2Loss } from '../losses/zoo2-cases.js';
import { expectAllOk, freshDir, runRanks } from './helpers.js';
import type { CollectiveCounts } from './workers/counting.js';
import { ZOO2_WRONG_VARIANT_OF, ZOO2_WRONG_VARIANTS, type Zoo2WrongVariant } from './workers/zoo2-loss-problems.js';
import type { Zoo2LossesWorkerResult } from './workers/zoo2-losses.js';

const TOL = 1e-5;

/** Collectives per rank and case, forward and backward together, as the doc comments state. */
const EXPECTED_COLLECTIVES: Record<Zoo2Loss, Omit<CollectiveCounts, 'broadcast'>> = {
  // Sinkhorn per global crop (2): 1 all-reduce max + 3 all-reduce sums (one per iteration).
  swav: { allGather: 0, reduceScatter: 0, allReduce: 8 },
  'swav-queue': { allGather: 0, reduceScatter: 0, allReduce: 8 },
  dino: { allGather: 0, reduceScatter: 0, allReduce: 1 },
  mae: { allGather: 0, reduceScatter: 0, allReduce: 1 },
  wmse: { allGather: 1, reduceScatter: 1, allReduce: 0 },
  vibcreg: { allGather: 0, reduceScatter: 0, allReduce: 4 },
  all4one: { allGather: 0, reduceScatter: 0, allReduce: 4 },
  // Two halves, each one gather forward and its reduce-scatter backward.
  'all4one-centroid': { allGather: 2, reduceScatter: 2, allReduce: 0 },
};

/** What each negative control must get wrong (and, where the loss has no collective of its own, what it keeps right). */
const CONTROL_EXPECTATIONS: Record<Zoo2WrongVariant, (e: RankCheckErrors) => boolean> = {
  'swav-local-sinkhorn': (e) => e.outputs > 0.1 && e.rankLoss > 1e-2,
  // The loss itself needs no collective: only the centre is off.
  'dino-local-centre': (e) => e.outputs > 1e-2 && e.rankLoss <= TOL && e.grad <= TOL,
  'mae-local-mean': (e) => e.rankLoss > 1e-2 && e.grad > 1e-2,
  'wmse-local-whitening': (e) => e.rankLoss > 1e-2 && e.grad > 1e-2,
  'vibcreg-local-stats': (e) => e.rankLoss > 1e-2 && e.grad > 1e-2,
  'all4one-local-stats': (e) => e.rankLoss > 1e-2 && e.grad > 1e-2,
  'all4one-centroid-local-candidates': (e) => e.rankLoss > 1e-2 && e.grad > 1e-2,
};

describe('distributed/zoo2-losses: every zoo2 loss with W real processes equals the float64 global loss', function () {
  this.timeout(120_000);

  before(() => {
    loadGlooAddon();
  });

  for (const W of [2, 3]) {
    describe(`W = ${W}`, () => {
      let outcomes: Zoo2LossesWorkerResult[] = [];

      before(async () => {
        const dir = freshDir(`zoo2-losses-w${W}`);
        try {
          const raw = await runRanks(
            'zoo2-losses',
            {
              dir,
              worldSize: W,
              rendezvous: pathToFileURL(join(dir, 'store')).href,
              timeoutMs: 30_000,
              losses: [...ZOO2_LOSSES],
              variants: [...ZOO2_WRONG_VARIANTS],
            },
            90_000,
          );
          expectAllOk(raw);
          outcomes = raw.map((o) => o.result as Zoo2LossesWorkerResult);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });

      for (const loss of ZOO2_LOSSES) {
        it(`${loss}: per-rank losses, their mean, the local-row gradients / W and the outputs match the reference (1e-5)`, () => {
          const c = loadZoo2Case(zoo2FixturePath(loss));
          const results = outcomes.map((o) => o.losses[loss]!);
          const e = checkRanks(c, results);
          assert.ok(e.rankLoss <= TOL, `${loss}: per-rank loss error ${e.rankLoss}`);
          assert.ok(e.meanLoss <= TOL, `${loss}: mean of per-rank losses vs global loss ${e.meanLoss}`);
          assert.ok(e.grad <= TOL, `${loss}: local-row gradient error ${e.grad}`);
          assert.ok(e.outputs <= TOL, `${loss}: output error ${e.outputs}`);
          assert.deepEqual(e.nonZeroDetached, [], `${loss}: detached inputs with a non-zero gradient`);
          const values = results.map((r) => r.value);
          // Different data per rank gives different per-rank losses, except All4One's feature
          // term, which every rank returns whole (the global loss).
          assert.equal(new Set(values).size, loss === 'all4one' ? 1 : W, `${loss}: per-rank losses ${values}`);
          for (const res of results) {
            const { broadcast, ...counts } = res.collectives;
            assert.deepEqual(counts, EXPECTED_COLLECTIVES[loss], `${loss}: collectives`);
            assert.equal(broadcast, 0);
          }
        });
      }

      it('negative controls: the same check rejects every loss with its global statistic over the local batch', () => {
        for (const v of ZOO2_WRONG_VARIANTS) {
          const c = loadZoo2Case(zoo2FixturePath(ZOO2_WRONG_VARIANT_OF[v]));
          const e = checkRanks(
            c,
            outcomes.map((o) => o.variants[v]!),
          );
          assert.ok(CONTROL_EXPECTATIONS[v](e), `${v} not caught as expected: ${JSON.stringify(e)}`);
        }
      });

      it('allocates no tensors it does not free (every loss and control, forward and backward)', () => {
        outcomes.forEach((o, r) => assert.equal(o.leaked, 0, `rank ${r} leaked ${o.leaked} tensors`));
      });
    });
  }
});

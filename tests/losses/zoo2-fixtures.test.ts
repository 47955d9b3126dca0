/**
 * The zoo's second set of losses (SwAV with Sinkhorn-Knopp, without and with a queue; DINO
 * with its centre; MAE; W-MSE; VIbCReg; All4One's feature term) against their float64
 * PyTorch reference files (scripts/gen_zoo2_loss_fixtures.py, zoo2-*.json), one process: the
 * value to 1e-5 relative, every input gradient and every output (assignments, centre) to 1e-5
 * of the largest reference entry, and detached or constant inputs an exactly zero gradient.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { tf } from '../../src/core/tf.js';
import { FIXTURE_DIR, useCpuEngine } from './helpers.js';
import { checkRanks, floatInputs } from './zoo-cases.js';
import { evaluateZoo2Case, loadZoo2Case, ZOO2_LOSSES, zoo2FixturePath } from './zoo2-cases.js';

const TOL = 1e-5;

/** Inputs whose reference gradient is zero: teachers, centres, momentum projections, images. */
const EXPECTED_ZERO: Record<string, string[]> = {
  swav: [],
  'swav-queue': ['queue0', 'queue1'],
  dino: ['teacher0', 'teacher1', 'centre'],
  mae: ['images'],
  wmse: [],
  vibcreg: [],
  all4one: ['momentumZ1', 'momentumZ2'],
  'all4one-centroid': [],
};

describe('zoo2 losses against float64 PyTorch reference files (W = 1)', () => {
  before(useCpuEngine);

  it('has one file per case, per-rank losses for W = 2 and 3, outputs where the case has some', () => {
    const files = readdirSync(FIXTURE_DIR).filter((f) => f.startsWith('zoo2-') && f.endsWith('.json'));
    assert.deepEqual(files.sort(), ZOO2_LOSSES.map((l) => `zoo2-${l}.json`).sort());
    for (const loss of ZOO2_LOSSES) {
      const c = loadZoo2Case(zoo2FixturePath(loss));
      assert.equal(c.loss, loss);
      assert.deepEqual(Object.keys(c.per_rank).sort(), ['2', '3']);
      for (const [w, values] of Object.entries(c.per_rank)) assert.equal(values.length, Number(w));
      assert.deepEqual(Object.keys(c.grads).sort(), floatInputs(c).sort());
      const outputs = Object.keys(c.outputs ?? {}).sort();
      assert.deepEqual(outputs, loss.startsWith('swav') ? ['assignments0', 'assignments1'] : loss === 'dino' ? ['centre'] : []);
    }
  });

  for (const loss of ZOO2_LOSSES) {
    it(`${loss}: value, gradients and outputs match; detached inputs get exactly zero`, () => {
      const c = loadZoo2Case(zoo2FixturePath(loss));
      const before = tf.memory().numTensors;
      const res = evaluateZoo2Case(c, 0, 1, undefined);
      assert.equal(tf.memory().numTensors, before, 'leaked tensors');
      const e = checkRanks({ ...c, per_rank: { '1': [c.loss_value] } }, [res]);
      assert.ok(e.rankLoss <= TOL, `${loss}: value ${res.value} vs ${c.loss_value} (relative error ${e.rankLoss})`);
      assert.ok(e.grad <= TOL, `${loss}: gradient error ${e.grad} of the largest entry`);
      assert.ok(e.outputs <= TOL, `${loss}: output error ${e.outputs} of the largest entry`);
      assert.deepEqual(e.nonZeroDetached, [], `${loss}: detached inputs with a non-zero gradient`);
      const zero = Object.entries(c.grads)
        .filter(([, g]) => g.every((v) => v === 0))
        .map(([k]) => k);
      assert.deepEqual(zero.sort(), EXPECTED_ZERO[loss]!.sort(), `${loss}: inputs with a zero reference gradient`);
    });
  }
});

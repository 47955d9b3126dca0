/**
 * The zoo losses (MoCo v2+, MoCo v3, SimSiam, NNCLR, SupCon, ReSSL, DCL, DCLW) against their
 * float64 PyTorch reference files (scripts/gen_zoo_loss_fixtures.py, zoo-*.json), one process:
 * the value to 1e-5 relative, every input gradient to 1e-5 of the largest reference entry of
 * that input, and detached or constant inputs an exactly zero gradient.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { tf } from '../../src/core/tf.js';
import { FIXTURE_DIR, useCpuEngine } from './helpers.js';
import { evaluateZooCase, floatInputs, loadZooCase, maxAbs, scaledError, ZOO_LOSSES, zooFixturePath } from './zoo-cases.js';

const TOL = 1e-5;

describe('zoo losses against float64 PyTorch reference files (W = 1)', () => {
  before(useCpuEngine);

  it('has one file per loss, N = 12 rows, per-rank losses for W = 2 and 3', () => {
    const files = readdirSync(FIXTURE_DIR).filter((f) => f.startsWith('zoo-') && f.endsWith('.json'));
    assert.deepEqual(files.sort(), ZOO_LOSSES.map((l) => `zoo-${l}.json`).sort());
    for (const loss of ZOO_LOSSES) {
      const c = loadZooCase(zooFixturePath(loss));
      assert.equal(c.loss, loss);
      assert.equal(c.N, 12);
      assert.deepEqual(Object.keys(c.per_rank).sort(), ['2', '3']);
      for (const [w, values] of Object.entries(c.per_rank)) assert.equal(values.length, Number(w));
      assert.deepEqual(Object.keys(c.grads).sort(), floatInputs(c).sort());
    }
  });

  for (const loss of ZOO_LOSSES) {
    it(`${loss}: value and gradients match; detached inputs get exactly zero`, () => {
      const path = zooFixturePath(loss);
      assert.ok(existsSync(path), path);
      const c = loadZooCase(path);
      const before = tf.memory().numTensors;
      const res = evaluateZooCase(c, 0, 1, undefined);
      assert.equal(tf.memory().numTensors, before, 'leaked tensors');
      const valueError = Math.abs(res.value - c.loss_value) / Math.abs(c.loss_value);
      assert.ok(valueError <= TOL, `${loss}: value ${res.value} vs ${c.loss_value} (relative error ${valueError})`);
      let zeroInputs = 0;
      for (const name of floatInputs(c)) {
        const ref = c.grads[name]!;
        const scale = maxAbs(ref);
        if (scale === 0) {
          zeroInputs++;
          assert.ok(
            res.grads[name]!.every((g) => g === 0),
            `${loss}: ${name} is detached: its gradient must be exactly 0`,
          );
        } else {
          const e = scaledError(res.grads[name]!, ref, scale);
          assert.ok(e <= TOL, `${loss}: gradient of ${name}: error ${e} of the largest entry`);
        }
      }
      // Which inputs are constants: the keys, the queues, the neighbours and the targets.
      const expectedZero: Record<string, number> = { moco: 2, mocov3: 1, simsiam: 1, nnclr: 1, supcon: 0, ressl: 2, dcl: 0, dclw: 0 };
      assert.equal(zeroInputs, expectedZero[loss], `${loss}: number of inputs with a zero reference gradient`);
    });
  }
});

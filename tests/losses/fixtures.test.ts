/**
 * The losses against float64 PyTorch reference cases: the generated fixtures
 * (scripts/gen_loss_fixtures.py, `case-*.json`) and the example case of docs/loss-case.md
 * (tests/fixtures/losses/loss-case-example.json).
 * Values and gradients must agree to 1e-4 (relative; gradients relative to the largest entry).
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../../src/core/tf.js';
import { barlowTwinsLossWithTerms, vicregLossWithTerms } from '../../src/losses/index.js';
import { checkLossCase, loadLossCase, type LossCase } from '../../src/verify/index.js';
import { EXAMPLE_CASE, FIXTURE_DIR, useCpuEngine } from './helpers.js';

const generated = readdirSync(FIXTURE_DIR)
  .filter((f) => f.startsWith('case-') && f.endsWith('.json'))
  .sort()
  .map((f) => join(FIXTURE_DIR, f));

function inputs(c: LossCase, k: 'z1' | 'z2'): tf.Tensor2D {
  return tf.tensor2d(c.inputs[k], [c.N, c.D]);
}

describe('losses against PyTorch reference cases', () => {
  before(useCpuEngine);

  it('has generated fixtures (N divisible by 2, 3 and 4)', () => {
    assert.ok(generated.length >= 3, `expected fixtures in ${FIXTURE_DIR}`);
    for (const f of generated) assert.equal(loadLossCase(f).N % 12, 0, f);
  });

  for (const label of ['example case', ...generated.map((f) => f.slice(FIXTURE_DIR.length + 1))]) {
    it(`${label}: every loss matches in value and gradient (W = 1)`, () => {
      const path = label === 'example case' ? EXAMPLE_CASE : join(FIXTURE_DIR, label);
      const c = loadLossCase(path);
      const report = checkLossCase(c);
      assert.deepEqual(report.results.map((r) => r.name).sort(), ['barlow', 'byol', 'simclr', 'vicreg']);
      for (const r of report.results) {
        assert.equal(r.status, 'passed', `${label} ${r.name}: ${JSON.stringify(r)}`);
        assert.ok((r.lossError ?? 1) < 1e-4 && (r.gradError ?? 1) < 1e-4, JSON.stringify(r));
        if (c.distributed?.worldSize === 1) assert.ok((r.rankLossError ?? 1) < 1e-4, JSON.stringify(r));
      }
      assert.ok(report.passed);
    });

    it(`${label}: the logged terms match (Barlow on/off-diagonal, VICReg three terms)`, () => {
      const path = label === 'example case' ? EXAMPLE_CASE : join(FIXTURE_DIR, label);
      const c = loadLossCase(path);
      const h = c.hyper;
      tf.tidy(() => {
        const [z1, z2] = [inputs(c, 'z1'), inputs(c, 'z2')];
        const bt = barlowTwinsLossWithTerms(z1, z2, { lambd: h.lambd ?? NaN, scale: h.scale ?? NaN, eps: h.bt_eps });
        const vic = vicregLossWithTerms(z1, z2, {
          simWeight: h.sim_w ?? NaN,
          varWeight: h.var_w ?? NaN,
          covWeight: h.cov_w ?? NaN,
          gamma: h.gamma,
          eps: h.vic_eps,
        });
        const got: Record<string, number> = {
          on_diag: bt.onDiag.dataSync()[0],
          off_diag: bt.offDiag.dataSync()[0],
          invariance: vic.invariance.dataSync()[0],
          variance: vic.variance.dataSync()[0],
          covariance: vic.covariance.dataSync()[0],
        };
        const expected = { ...c.losses.barlow.terms, ...c.losses.vicreg.terms };
        assert.equal(Object.keys(expected).length, 5);
        for (const [k, v] of Object.entries(expected)) {
          assert.ok(Math.abs(got[k] - v) < 1e-4 * Math.abs(v), `${label} ${k}: ${got[k]} vs ${v}`);
        }
      });
    });
  }
});

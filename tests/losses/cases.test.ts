/**
 * Every loss of the zoo against its float64 PyTorch reference case (scripts/gen_loss_cases.py,
 * tests/fixtures/losses/cases.json, `ssl-loss-oracle/2`), one process: the value to 1e-5
 * relative; every input gradient, output (SwAV's assignments) and state after (DINO's centre)
 * to 1e-5 of the largest reference entry; detached inputs (zero reference gradient) and state
 * an exactly zero gradient, and exactly the inputs each loss detaches; no leaked tensors. Also
 * the logged terms of Barlow Twins and VICReg, and the example case of the first format
 * (`ssl-loss-oracle/1`, another implementation) read backward.
 */
import assert from 'node:assert/strict';
import { tf } from '../../src/core/tf.js';
import { barlowTwinsLossWithTerms, vicregLossWithTerms } from '../../src/losses/index.js';
import { CASE_LOSS_NAMES, caseErrors, checkLossCases, errorsPass, evaluateLossCase, loadLossCases, type LossCase } from '../../src/verify/index.js';
import { CASES_FILE, EXAMPLE_CASE, useCpuEngine } from './helpers.js';

const TOL = 1e-5;

/** Per case: the inputs whose reference gradient is zero (targets, keys, teachers, momentum projections, images). */
const EXPECTED_ZERO: Record<string, string[]> = {
  simclr: [],
  barlow: [],
  byol: ['z1', 'z2'],
  vicreg: [],
  moco: ['key'],
  mocov3: ['key'],
  simsiam: ['z'],
  nnclr: ['neighbours'],
  supcon: [],
  ressl: ['k'],
  dcl: [],
  dclw: [],
  swav: [],
  'swav-queue': [],
  dino: ['teacher0', 'teacher1'],
  mae: ['images'],
  wmse: [],
  vibcreg: [],
  all4one: ['momentumZ1', 'momentumZ2'],
  'all4one-centroid': [],
  deepclusterv2: [],
  'deepclusterv2-lopsided': [],
  fastsiam: ['projection0', 'projection1', 'projection2', 'projection3'],
  tico: [],
  mmcr: [],
  simdino: ['teacher0', 'teacher1'],
  lejepa: ['projections'],
  ijepa: ['targets'],
  msn: ['target'],
  vicregl: ['location0', 'location1', 'location2'],
  'vicregl-features': [],
  ibot: ['teacher0', 'teacher1', 'teacherPatch0', 'teacherPatch1'],
  koleo: [],
  dinov2: ['teacher0', 'teacher1', 'teacherPatch0', 'teacherPatch1'],
};

const cases = loadLossCases(CASES_FILE).cases;

function tensor2d(c: LossCase, k: string): tf.Tensor2D {
  const t = c.inputs[k]!;
  return tf.tensor2d(t.data, t.shape as [number, number]);
}

describe('losses against their float64 PyTorch reference cases (W = 1)', () => {
  before(useCpuEngine);

  it('has a case for every loss ssl-zoo has, per-rank losses for W = 2, 3 and 4, state where the loss keeps some', () => {
    assert.deepEqual(cases.map((c) => c.name).sort(), Object.keys(EXPECTED_ZERO).sort());
    assert.deepEqual([...new Set(cases.map((c) => c.loss))].sort(), [...CASE_LOSS_NAMES].sort());
    for (const c of cases) assert.deepEqual(Object.keys(c.expected.perRank).sort(), ['2', '3', '4'], c.name);
    const withState = Object.fromEntries(cases.filter((c) => Object.keys(c.state).length > 0).map((c) => [c.name, Object.keys(c.state).sort()]));
    assert.deepEqual(withState, {
      moco: ['queue'],
      ressl: ['queue'],
      'swav-queue': ['queue0', 'queue1'],
      dino: ['centre'],
      tico: ['covariance'],
      ibot: ['centre', 'patchCentre'],
    });
    assert.deepEqual(Object.keys(cases.find((c) => c.name === 'dino')!.expected.stateAfter), ['centre']);
    assert.deepEqual(Object.keys(cases.find((c) => c.name === 'swav')!.expected.outputs).sort(), ['assignments0', 'assignments1']);
  });

  for (const c of cases) {
    it(`${c.name}: value, gradients, outputs and state after match; detached inputs and state get exactly zero`, () => {
      const before = tf.memory().numTensors;
      const res = evaluateLossCase(c, 0, 1, undefined);
      assert.equal(tf.memory().numTensors, before, 'leaked tensors');
      const e = caseErrors(c, [res]);
      assert.ok(e.loss <= TOL, `${c.name}: value ${res.value} vs ${c.expected.loss} (relative error ${e.loss})`);
      assert.ok(e.grad <= TOL, `${c.name}: gradient error ${e.grad} of the largest entry`);
      assert.ok((e.outputs ?? 0) <= TOL && (e.stateAfter ?? 0) <= TOL, `${c.name}: outputs ${e.outputs}, state after ${e.stateAfter}`);
      assert.deepEqual(e.detached, [], `${c.name}: detached inputs or state with a non-zero gradient`);
      assert.ok(errorsPass(e, TOL));
      const zero = Object.entries(c.expected.grad)
        .filter(([, g]) => g.every((v) => v === 0))
        .map(([k]) => k);
      assert.deepEqual(zero.sort(), EXPECTED_ZERO[c.name]!.sort(), `${c.name}: inputs with a zero reference gradient`);
    });
  }

  it('a deliberately wrong reference fails: a gradient entry, the DINO centre, a SwAV assignment, a per-rank loss', () => {
    const edited = structuredClone(cases);
    const by = (name: string) => edited.find((c) => c.name === name)!;
    by('nnclr').expected.grad.predictions![5] *= 1.01;
    by('dino').expected.stateAfter.centre!.data[2] += 1e-3;
    by('swav').expected.outputs.assignments1!.data[7] *= 1.01;
    by('mae').expected.perRank[2]![1] *= 1.001;
    const check = (name: string) => caseErrors(by(name), [evaluateLossCase(by(name), 0, 1, undefined)]);
    assert.ok(check('nnclr').grad > 1e-4);
    assert.ok(check('dino').stateAfter! > 1e-4);
    assert.ok(check('swav').outputs! > 1e-4);
    // Per-rank losses are compared for the W of the job only.
    assert.ok(errorsPass(check('mae'), TOL));
  });

  it('Barlow Twins and VICReg: the logged terms match', () => {
    for (const c of [...cases, ...loadLossCases(EXAMPLE_CASE).cases].filter((x) => x.loss === 'barlow' || x.loss === 'vicreg')) {
      const h = c.hyper;
      tf.tidy(() => {
        const [z1, z2] = [tensor2d(c, 'z1'), tensor2d(c, 'z2')];
        const got: Record<string, number> = {};
        if (c.loss === 'barlow') {
          const bt = barlowTwinsLossWithTerms(z1, z2, { lambd: h.lambd!, scale: h.scale!, eps: h.eps });
          Object.assign(got, { on_diag: bt.onDiag.dataSync()[0], off_diag: bt.offDiag.dataSync()[0] });
        } else {
          const vic = vicregLossWithTerms(z1, z2, { simWeight: h.simWeight!, varWeight: h.varWeight!, covWeight: h.covWeight!, gamma: h.gamma, eps: h.eps });
          Object.assign(got, { invariance: vic.invariance.dataSync()[0], variance: vic.variance.dataSync()[0], covariance: vic.covariance.dataSync()[0] });
        }
        const expected = c.expected.terms ?? {};
        assert.equal(Object.keys(expected).length, c.loss === 'barlow' ? 2 : 3, `${c.source} ${c.name}`);
        for (const [k, v] of Object.entries(expected)) assert.ok(Math.abs(got[k]! - v) < 1e-4 * Math.abs(v), `${c.source} ${c.name} ${k}: ${got[k]} vs ${v}`);
      });
    }
  });

  it('the example case of ssl-loss-oracle/1 (another implementation) passes every loss at W = 1', () => {
    const report = checkLossCases(loadLossCases(EXAMPLE_CASE), { tolerance: 1e-4 });
    assert.deepEqual(report.results.map((r) => r.name).sort(), ['barlow', 'byol', 'simclr', 'vicreg']);
    for (const r of report.results) {
      assert.equal(r.status, 'passed', JSON.stringify(r));
      assert.ok(r.errors?.rankLoss !== undefined, `${r.name}: the /1 file records per-rank losses for W = 1`);
    }
  });
});

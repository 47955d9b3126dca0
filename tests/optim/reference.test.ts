/**
 * SGD, LARS and AdamW against PyTorch (torch.optim.SGD, torch.optim.AdamW, solo-learn's
 * LARS) and the warmup-cosine schedule against Lightning Bolts' chained scheduler.
 * Fixtures: scripts/gen_optim_fixtures.py -> tests/fixtures/optim/reference.json.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { tf } from '../../src/core/tf.js';
import { createOptimizer, WarmupCosineSchedule, type NamedParam, type OptimizerOptions, type ParamGroup } from '../../src/optim/index.js';
import { assertClose, disposeGrads, disposeParams, values } from './helpers.js';

interface Fixture {
  shapes: Record<string, number[]>;
  groups: Array<{ name: string; params: string[]; weightDecay: number; momentum?: number }>;
  lrs: number[][];
  params: Record<string, number[]>;
  grads: Array<Record<string, number[]>>;
  cases: Array<{ name: string; optimizer: string; options: OptimizerOptions; expected: Array<Record<string, number[]>> }>;
  schedule: {
    warmupSteps: number;
    totalSteps: number;
    warmupStartLr: number;
    minLr: number;
    baseLrs: number[];
    lrs: number[][];
  };
}

const fixture: Fixture = JSON.parse(readFileSync(fileURLToPath(new URL('../../../tests/fixtures/optim/reference.json', import.meta.url)), 'utf8'));

describe('optim: PyTorch reference', () => {
  for (const c of fixture.cases) {
    it(`${c.name} matches PyTorch over ${c.expected.length} steps (rel 1e-5)`, () => {
      const named = new Map<string, NamedParam>();
      for (const [name, shape] of Object.entries(fixture.shapes)) {
        named.set(name, { name, variable: tf.variable(tf.tensor(fixture.params[name]!, shape), true) });
      }
      const groups: ParamGroup[] = fixture.groups.map((g) => ({
        name: g.name,
        params: g.params.map((n) => named.get(n)!),
        lr: 0,
        weightDecay: g.weightDecay,
        ...(g.momentum !== undefined ? { momentum: g.momentum } : {}),
      }));
      const opt = createOptimizer(c.optimizer, groups, c.options);
      c.expected.forEach((expected, step) => {
        fixture.lrs[step]!.forEach((lr, i) => opt.setLr(i, lr));
        const grads: tf.NamedTensorMap = {};
        for (const [name, g] of Object.entries(fixture.grads[step]!)) {
          const p = named.get(name)!;
          grads[p.variable.name] = tf.tensor(g, p.variable.shape);
        }
        opt.step(grads);
        disposeGrads(grads);
        for (const [name, e] of Object.entries(expected)) {
          assertClose(values(named.get(name)!.variable), e, `${c.name} step ${step} ${name}`);
        }
      });
      opt.dispose();
      disposeParams([...named.values()]);
    });
  }

  it('warmup-cosine matches Lightning Bolts LinearWarmupCosineAnnealingLR step by step', () => {
    const s = fixture.schedule;
    const schedule = new WarmupCosineSchedule(s);
    const vars = s.baseLrs.map(() => tf.variable(tf.zeros([1])));
    const opt = createOptimizer(
      'sgd',
      s.baseLrs.map((lr, i) => ({ name: `g${i}`, params: [{ name: `p${i}`, variable: vars[i]! }], lr, weightDecay: 0 })),
    );
    s.lrs.forEach((expected, step) => {
      schedule.apply(opt, step);
      assertClose(
        opt.groups.map((g) => g.lr),
        expected,
        `step ${step}`,
        1e-12,
        1e-15,
      );
    });
    opt.dispose();
    disposeParams(vars);
  });
});

/** Warmup-cosine schedule against its formula, static groups, and lr scaling. */
import { strict as assert } from 'node:assert';
import { UserError } from '../../src/core/errors.js';
import { scaleLearningRate, SGD, warmupCosineLr, WarmupCosineSchedule } from '../../src/optim/index.js';
import { disposeGrads, disposeParams, gradsOf, param } from './helpers.js';

const close = (a: number, e: number, what: string) => assert.ok(Math.abs(a - e) <= 1e-12 * Math.max(1, Math.abs(e)), `${what}: ${a} vs ${e}`);

describe('optim: warmup-cosine schedule', () => {
  // W = 10, T = 110, start 0.01, base 1, min 0.001.
  const s = new WarmupCosineSchedule({ warmupSteps: 10, totalSteps: 110, warmupStartLr: 0.01, minLr: 0.001 });

  it('step 0 is warmupStartLr', () => close(s.lrAt(0, 1), 0.01, 'step 0'));

  it('mid-warmup is linear, reaching base lr at step W - 1 (Bolts)', () => {
    close(s.lrAt(4, 1), 0.01 + (4 * 0.99) / 9, 'step 4');
    close(s.lrAt(9, 1), 1, 'step 9');
  });

  it('end of warmup: step W is base lr', () => close(s.lrAt(10, 1), 1, 'step 10'));

  it('mid-cosine is (base + min) / 2', () => close(s.lrAt(60, 1), (1 + 0.001) / 2, 'step 60'));

  it('final step and beyond', () => {
    close(s.lrAt(109, 1), 0.001 + 0.5 * 0.999 * (1 + Math.cos((Math.PI * 99) / 100)), 'step 109');
    close(s.lrAt(110, 1), 0.001, 'step 110');
    close(s.lrAt(500, 1), 0.001, 'past the end');
  });

  it('scales with each base lr; the pure function equals the method', () => {
    close(s.lrAt(60, 0.3), 0.001 + 0.5 * (0.3 - 0.001), 'base 0.3');
    close(warmupCosineLr(37, 2, s.options), s.lrAt(37, 2), 'pure');
  });

  it('defaults: warmupStartLr 3e-5, minLr 0; no warmup starts at base lr', () => {
    const d = new WarmupCosineSchedule({ warmupSteps: 5, totalSteps: 20 });
    close(d.lrAt(0, 1), 3e-5, 'start');
    close(d.lrAt(20, 1), 0, 'min');
    const nw = new WarmupCosineSchedule({ warmupSteps: 0, totalSteps: 20 });
    close(nw.lrAt(0, 0.5), 0.5, 'no warmup');
    const e = WarmupCosineSchedule.fromEpochs({ warmupEpochs: 2, maxEpochs: 10, stepsPerEpoch: 50 });
    assert.equal(e.options.warmupSteps, 100);
    assert.equal(e.options.totalSteps, 500);
  });

  it('rejects bad settings with UserErrors naming the field', () => {
    assert.throws(
      () => new WarmupCosineSchedule({ warmupSteps: 10, totalSteps: 10 }),
      (e: unknown) => e instanceof UserError && /totalSteps: 10/.test(e.message),
    );
    assert.throws(() => new WarmupCosineSchedule({ warmupSteps: -1, totalSteps: 10 }), /warmupSteps/);
    assert.throws(() => s.lrAt(-1, 1), RangeError);
  });

  it('apply() drives scheduled groups from their initial lr and leaves static groups alone', () => {
    const a = param('a', [1]);
    const b = param('b', [1]);
    const opt = new SGD([
      { name: 'backbone', params: [a], lr: 0.4, weightDecay: 0 },
      { name: 'classifier', params: [b], lr: 0.1, weightDecay: 0, scheduled: false },
    ]);
    for (let step = 0; step < 30; step++) {
      s.apply(opt, step);
      close(opt.getLr(0), s.lrAt(step, 0.4), `backbone at ${step}`);
      close(opt.getLr(1), 0.1, `classifier at ${step}`);
      const grads = gradsOf([
        [a, [0]],
        [b, [0]],
      ]);
      opt.step(grads);
      disposeGrads(grads);
    }
    // After restoring a checkpoint (which restores the current lr), the base is still the initial lr.
    const state = opt.stateDict();
    const c = param('a', [1]);
    const d = param('b', [1]);
    const opt2 = new SGD([
      { name: 'backbone', params: [c], lr: 0.4, weightDecay: 0 },
      { name: 'classifier', params: [d], lr: 0.1, weightDecay: 0, scheduled: false },
    ]);
    opt2.loadStateDict(state);
    close(opt2.getLr(0), s.lrAt(29, 0.4), 'restored lr');
    s.apply(opt2, 30);
    close(opt2.getLr(0), s.lrAt(30, 0.4), 'scheduled from the initial lr');
    opt.dispose();
    opt2.dispose();
    disposeParams([a, b, c, d]);
  });
});

describe('optim: scaleLearningRate', () => {
  it('baseLr * globalBatch / reference', () => {
    close(scaleLearningRate(0.3, 1024), 1.2, 'default reference 256');
    close(scaleLearningRate(0.3, 256), 0.3, 'reference batch');
    close(scaleLearningRate(1, 64, 128), 0.5, 'custom reference');
    assert.throws(() => scaleLearningRate(1, 0), /globalBatch/);
  });
});

import { strict as assert } from 'node:assert';
import { createBackbone } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Scalar, type Tensor, type Tensor1D, type Tensor2D } from '../../src/core/tf.js';
import { simclrViews, vicregViews, viewsFor } from '../../src/data/augment/recipes.js';
import { syntheticDataset } from '../../src/data/synthetic.js';
import { dclLoss, ntXentLoss, supconLoss, vicregLossWithTerms } from '../../src/losses/index.js';
import type { Sequential } from '../../src/core/layers.js';
import { DCL, SupCon, VICReg, type BaseMethod } from '../../src/methods/index.js';
import { getMethodClass, methodNames, resolveMethodArgs } from '../../src/methods/registry.js';

/** The three methods (DCL in both variants) on a tiny mlp setup: small heads, B = 6, two views of 8x8x1. */
const CASES: Array<{ title: string; name: string; args: Record<string, number> }> = [
  { title: 'vicreg', name: 'vicreg', args: { projHiddenDim: 8, projOutputDim: 4 } },
  { title: 'supcon', name: 'supcon', args: { projHiddenDim: 8, projOutputDim: 4 } },
  { title: 'dcl', name: 'dcl', args: { projHiddenDim: 8, projOutputDim: 4 } },
  { title: 'dcl (DCLW, sigma 0.5)', name: 'dcl', args: { projHiddenDim: 8, projOutputDim: 4, sigma: 0.5 } },
];

type WithProjector = BaseMethod & { projector: Sequential };

function build(name: string, args: Record<string, number>, seed = 3): WithProjector {
  const cls = getMethodClass(name);
  return new cls({
    createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
    numClasses: 3,
    rng: new Rng(seed),
    args: resolveMethodArgs(name, args),
  }) as WithProjector;
}

function batch(seed: number, labels = [0, 1, 2, 0, 1, 2]): { views: Tensor[]; labels: Tensor1D } {
  const rng = new Rng(seed);
  return {
    views: [0, 1].map(() => tf.tensor4d(rng.normalArray(labels.length * 64), [labels.length, 8, 8, 1])),
    labels: tf.tensor1d(labels, 'int32'),
  };
}

/** The method's objective written out with the library losses, from its own backbone and projector. */
function directLoss(m: WithProjector, views: Tensor[], labels: Tensor1D): Scalar {
  const [z1, z2] = views.map((v) => m.projector.forward(m.backbone.forward(v))) as Tensor2D[];
  if (m instanceof VICReg) {
    const terms = vicregLossWithTerms(z1, z2, { simWeight: 25, varWeight: 25, covWeight: 1 });
    return terms.loss;
  }
  if (m instanceof SupCon) return supconLoss([z1, z2], labels, { temperature: 0.2 });
  if (m instanceof DCL) return dclLoss(z1, z2, m.args.sigma > 0 ? { temperature: 0.1, sigma: m.args.sigma } : { temperature: 0.1 });
  throw new Error('unexpected method');
}

function maxAbsDiff(a: Tensor, b: Tensor): number {
  return tf.tidy(() => tf.max(tf.abs(tf.sub(a, b))).dataSync()[0]);
}

function sslLossOf(m: BaseMethod, views: Tensor[], labels: Tensor): Scalar {
  const out = m.trainingStep(views, labels);
  const loss = tf.clone(out.metrics.loss) as Scalar;
  tf.dispose([out.loss, ...Object.values(out.metrics)]);
  return loss;
}

describe('methods vicreg, supcon, dcl', () => {
  it('are registered with their paper and solo-learn recipe defaults (dcl: SimCLR recipe, temperature 0.1)', () => {
    for (const name of ['vicreg', 'supcon', 'dcl']) assert.ok(methodNames().includes(name), name);
    assert.equal(getMethodClass('vicreg'), VICReg);
    assert.equal(getMethodClass('supcon'), SupCon);
    assert.equal(getMethodClass('dcl'), DCL);
    assert.match(VICReg.paper, /^Bardes, Ponce, LeCun 2022, "VICReg/);
    assert.match(SupCon.paper, /^Khosla et al\. 2020, "Supervised Contrastive Learning"$/);
    assert.match(DCL.paper, /^Yeh et al\. 2022, "Decoupled Contrastive Learning"$/);
    assert.deepEqual(resolveMethodArgs('vicreg', {}), { projHiddenDim: 2048, projOutputDim: 2048, simLossWeight: 25, varLossWeight: 25, covLossWeight: 1 });
    assert.deepEqual(VICReg.optimDefaults, { optimizer: 'lars', lr: 0.3, classifierLr: 0.1, weightDecay: 1e-4 });
    assert.equal(VICReg.viewRecipe, 'vicreg');
    assert.deepEqual(resolveMethodArgs('supcon', {}), { projHiddenDim: 2048, projOutputDim: 256, temperature: 0.2, variant: 'in' });
    assert.deepEqual(SupCon.optimDefaults, { optimizer: 'sgd', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-5 });
    assert.equal(SupCon.viewRecipe, 'simclr');
    assert.deepEqual(resolveMethodArgs('dcl', {}), { projHiddenDim: 2048, projOutputDim: 256, temperature: 0.1, sigma: 0 });
    assert.deepEqual(DCL.optimDefaults, { optimizer: 'lars', lr: 0.4, classifierLr: 0.1, weightDecay: 1e-4 });
    assert.equal(DCL.viewRecipe, 'simclr');
    assert.equal(SupCon.needsLabels, true);
    assert.equal(VICReg.needsLabels, false);
    assert.equal(DCL.needsLabels, false);
  });

  it('vicreg: an expander Linear-BN-ReLU-Linear-BN-ReLU-Linear; supcon and dcl: Linear-ReLU-Linear', () => {
    const kinds = (m: WithProjector) => m.projector.namedChildren().map(([, l]) => l.constructor.name);
    const vicreg = build('vicreg', CASES[0]!.args);
    assert.deepEqual(kinds(vicreg), ['Linear', 'BatchNorm', 'ReLU', 'Linear', 'BatchNorm', 'ReLU', 'Linear']);
    for (const name of ['supcon', 'dcl']) {
      const m = build(name, CASES[1]!.args);
      assert.deepEqual(kinds(m), ['Linear', 'ReLU', 'Linear'], name);
      m.dispose();
    }
    vicreg.dispose();
  });

  it("vicreg's views: solo-learn's VICReg recipe, two identical views with solarization 0.1 (not Barlow's asymmetric one)", () => {
    const ds = syntheticDataset({ split: 'train', size: 8, imageSize: 16 });
    const views = vicregViews(ds);
    assert.equal(views.length, 2);
    assert.deepEqual(views[0], views[1]);
    const v = views[0]!;
    assert.deepEqual(v.cropScale, [0.2, 1]);
    assert.deepEqual([v.brightness, v.contrast, v.saturation, v.hue, v.colorJitterProb], [0.4, 0.4, 0.2, 0.1, 0.8]);
    assert.deepEqual([v.grayscaleProb, v.hflipProb, v.solarizationProb, v.gaussianBlurProb], [0.2, 0.5, 0.1, 0]);
    assert.equal(vicregViews(ds, 96)[0]!.gaussianBlurProb, 0.5);
    assert.deepEqual(viewsFor('vicreg', ds), views);
    assert.notDeepEqual(viewsFor('vicreg', ds), simclrViews(ds));
  });

  for (const c of CASES) {
    it(`${c.title}: one training step gives a finite loss equal to the library loss on its projections, with the same gradients`, () => {
      const m = build(c.name, c.args);
      const { views, labels } = batch(7);
      const named = m.parameterGroups()[0]!.params; // [dotted name, variable]
      const methodVars = named.map(([, v]) => v);
      const classifierVars = m.classifier.parameters();
      const viaStep = tf.variableGrads(() => sslLossOf(m, views, labels), methodVars);
      const direct = tf.variableGrads(() => directLoss(m, views, labels), methodVars);
      const loss = viaStep.value.dataSync()[0];
      assert.ok(Number.isFinite(loss), `loss ${loss}`);
      assert.ok(Math.abs(loss - direct.value.dataSync()[0]) <= 1e-6 * Math.max(1, Math.abs(loss)), `${loss} vs ${direct.value.dataSync()[0]}`);
      for (const v of methodVars) {
        const g = viaStep.grads[v.name]!;
        const gNorm = tf.tidy(() => tf.norm(g).dataSync()[0]);
        assert.ok(Number.isFinite(gNorm), `${v.name}: gradient not finite`);
        assert.ok(maxAbsDiff(g, direct.grads[v.name]!) <= 1e-6 * Math.max(1, gNorm), `${v.name}: gradient differs from the library loss's`);
      }
      // Every layer of the backbone and the head learns (no detached branch by mistake).
      const names = named.filter(([n, v]) => /weight$/.test(n) && tf.tidy(() => tf.norm(viaStep.grads[v.name]!).dataSync()[0]) > 0).map(([n]) => n);
      assert.ok(names.some((n) => n.includes('backbone')) && names.some((n) => n.includes('projector')), names.join(', '));
      // The online classifier learns, from detached features: the total loss's backbone gradient is the method loss's.
      const total = tf.variableGrads(() => {
        const out = m.trainingStep(views, labels);
        tf.dispose(Object.values(out.metrics));
        return out.loss;
      }, [...methodVars, ...classifierVars]);
      for (const v of methodVars) assert.ok(maxAbsDiff(total.grads[v.name]!, viaStep.grads[v.name]!) < 1e-6, `${v.name}: classifier leaked`);
      for (const v of classifierVars) assert.ok(tf.tidy(() => tf.norm(total.grads[v.name]!).dataSync()[0]) > 0, 'classifier gets a gradient');
      tf.dispose([viaStep.value, direct.value, total.value, ...Object.values(viaStep.grads), ...Object.values(direct.grads), ...Object.values(total.grads)]);
      tf.dispose([...views, labels]);
      m.dispose();
    });
  }

  it('vicreg logs its unweighted invariance, variance and covariance terms; the loss is 25, 25, 1 times them', () => {
    const m = build('vicreg', CASES[0]!.args);
    const { views, labels } = batch(11);
    const out = m.trainingStep(views, labels);
    const value = (k: string) => out.metrics[k]!.dataSync()[0];
    const [z1, z2] = views.map((v) => m.projector.forward(m.backbone.forward(v))) as Tensor2D[];
    const expected = vicregLossWithTerms(z1!, z2!, { simWeight: 25, varWeight: 25, covWeight: 1 });
    for (const k of ['invariance', 'variance', 'covariance'] as const) {
      const want = expected[k].dataSync()[0];
      assert.ok(Math.abs(value(k) - want) <= 1e-6 * Math.max(1, Math.abs(want)), `${k}: ${value(k)} vs ${want}`);
    }
    assert.ok(value('variance') > 0 && value('covariance') > 0 && value('invariance') > 0);
    const sum = 25 * value('invariance') + 25 * value('variance') + value('covariance');
    assert.ok(Math.abs(value('loss') - sum) <= 1e-5 * sum, `${value('loss')} vs ${sum}`);
    tf.dispose([out.loss, ...Object.values(out.metrics), z1!, z2!, ...Object.values(expected), ...views, labels]);
    m.dispose();
  });

  it('supcon uses the labels: other labels give another loss; all-distinct labels give NT-Xent at the same temperature', () => {
    const m = build('supcon', { ...CASES[1]!.args, temperature: 0.3 });
    const { views } = batch(5);
    const [z1, z2] = views.map((v) => m.projector.forward(m.backbone.forward(v))) as Tensor2D[];
    const lossWith = (labels: number[]) => tf.tidy(() => m.embeddingLoss([z1!, z2!], tf.tensor1d(labels, 'int32')).loss.dataSync()[0]);
    const grouped = lossWith([0, 1, 2, 0, 1, 2]);
    const otherGroups = lossWith([0, 0, 1, 1, 2, 2]);
    const distinct = lossWith([0, 1, 2, 3, 4, 5]);
    assert.ok(Math.abs(grouped - otherGroups) > 1e-3, `${grouped} vs ${otherGroups}`);
    assert.ok(Math.abs(grouped - distinct) > 1e-3, `${grouped} vs ${distinct}`);
    const ntXent = tf.tidy(() => ntXentLoss(z1!, z2!, { temperature: 0.3 }).dataSync()[0]);
    assert.ok(Math.abs(distinct - ntXent) <= 1e-5 * Math.abs(ntXent), `supcon ${distinct} vs NT-Xent ${ntXent}`);
    // Through the training step too: only the labels change.
    const a = batch(5, [0, 1, 2, 0, 1, 2]);
    const b = batch(5, [2, 2, 2, 0, 1, 1]);
    const la = tf.tidy(() => sslLossOf(m, a.views, a.labels).dataSync()[0]);
    const lb = tf.tidy(() => sslLossOf(m, b.views, b.labels).dataSync()[0]);
    assert.ok(Math.abs(la - lb) > 1e-3, `${la} vs ${lb}`);
    tf.dispose([z1!, z2!, ...views, ...a.views, a.labels, ...b.views, b.labels]);
    m.dispose();
  });

  it('dcl: sigma 0 (DCL) and sigma 0.5 (DCLW) give different losses on the same weights; sigma is validated', () => {
    const dcl = build('dcl', CASES[2]!.args);
    const dclw = build('dcl', CASES[3]!.args);
    assert.equal((dcl as DCL).weighted, false);
    assert.equal((dclw as DCL).weighted, true);
    const { views, labels } = batch(9);
    const l0 = tf.tidy(() => sslLossOf(dcl, views, labels).dataSync()[0]);
    const l1 = tf.tidy(() => sslLossOf(dclw, views, labels).dataSync()[0]);
    assert.ok(Number.isFinite(l0) && Number.isFinite(l1));
    assert.ok(Math.abs(l0 - l1) > 1e-4, `${l0} vs ${l1}`);
    assert.throws(() => resolveMethodArgs('dcl', { sigma: -0.5 }), /method_args\.sigma.*-0\.5.*a number >= 0/);
    assert.throws(() => resolveMethodArgs('dcl', { temperature: 0 }), /method_args\.temperature.*a number > 0/);
    assert.throws(() => resolveMethodArgs('dcl', { weighted: 1 }), /method_args\.weighted: not a hyperparameter of method 'dcl'; it has .*sigma/);
    tf.dispose([...views, labels]);
    dcl.dispose();
    dclw.dispose();
  });
});

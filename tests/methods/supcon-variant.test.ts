/**
 * SupCon's two losses (src/losses/supcon.ts `variant`) against an independent float64 PyTorch
 * reference written from the paper's equations (scripts/supcon_out_reference.py, values in
 * tests/fixtures/methods/supcon-variants.json): L_out (`out`, the paper's recommendation) and
 * L_in (`in`, solo-learn's, the default), loss and gradients; and the method's `variant`
 * argument reaching the loss.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { createBackbone } from '../../src/backbones/index.js';
import { Rng } from '../../src/core/random.js';
import { tf, type Tensor2D } from '../../src/core/tf.js';
import { supconLoss, type SupconVariant } from '../../src/losses/index.js';
import { SupCon } from '../../src/methods/index.js';
import { resolveMethodArgs } from '../../src/methods/registry.js';

interface Variant {
  loss: number;
  grads: number[][][];
}
interface Case {
  seed: number;
  temperature: number;
  labels: number[];
  views: number[][][];
  in: Variant;
  out: Variant;
}

const FIXTURE = JSON.parse(readFileSync(new URL('../../../tests/fixtures/methods/supcon-variants.json', import.meta.url), 'utf8')) as { cases: Case[] };

/** max |a - b| / max(1e-3, max |b|) over nested arrays. */
function relative(a: number[], b: number[]): number {
  const scale = Math.max(1e-3, ...b.map(Math.abs));
  return Math.max(...a.map((v, i) => Math.abs(v - b[i]!))) / scale;
}

describe('SupCon variants against a float64 PyTorch reference of the paper', () => {
  for (const c of FIXTURE.cases) {
    for (const variant of ['in', 'out'] as SupconVariant[]) {
      it(`L_${variant}: V = ${c.views.length}, B = ${c.labels.length}, labels [${c.labels.join(', ')}], τ ${c.temperature}: loss and gradients`, () => {
        const views = c.views.map((v) => tf.tensor2d(v));
        const labels = tf.tensor1d(c.labels, 'int32');
        const f = (...xs: tf.Tensor[]) => supconLoss(xs as Tensor2D[], labels, { temperature: c.temperature, variant });
        const { value, grads } = tf.valueAndGrads(f)(views);
        const expected = c[variant];
        const loss = value.dataSync()[0]!;
        assert.ok(Math.abs(loss - expected.loss) <= 1e-5 * Math.abs(expected.loss), `loss ${loss} vs reference ${expected.loss}`);
        const got = grads.map((g) => Array.from(g.dataSync()));
        const want = expected.grads.map((g) => g.flat());
        got.forEach((g, v) => {
          const err = relative(g, want[v]!);
          assert.ok(err < 1e-4, `gradient of view ${v}: relative difference ${err}`);
        });
        tf.dispose([...views, labels, value, ...grads]);
      });
    }
  }

  it('the variants differ when an anchor has several positives and agree with one positive each', () => {
    const c = FIXTURE.cases[0]!;
    // Jensen: L_out_i = -mean_p log q_p >= -log mean_p q_p = L_in_i + log |P(i)|, so the reference's values differ by at least mean log |P|.
    const views = c.views.length;
    const positives = c.labels.map((y) => views * c.labels.filter((l) => l === y).length - 1);
    const meanLogP = positives.reduce((a, p) => a + Math.log(p), 0) / positives.length;
    assert.ok(meanLogP > 0.5 && c.out.loss >= c.in.loss + meanLogP, `L_out ${c.out.loss}, L_in ${c.in.loss}, mean log |P| ${meanLogP}`);
    tf.tidy(() => {
      const views = c.views.map((v) => tf.tensor2d(v)) as Tensor2D[];
      const distinct = tf.tensor1d(
        c.labels.map((_, i) => i),
        'int32',
      );
      const [lin, lout] = (['in', 'out'] as const).map((variant) => supconLoss(views, distinct, { temperature: c.temperature, variant }).dataSync()[0]!);
      assert.ok(Math.abs(lin! - lout!) <= 1e-6 * Math.abs(lin!), `${lin} vs ${lout}`);
      assert.throws(() => supconLoss(views, distinct, { temperature: 0.2, variant: 'both' as SupconVariant }), /variant must be 'in' or 'out', got "both"/);
    });
  });

  it("the method's variant argument picks the loss (default in, solo-learn's)", () => {
    const build = (variant?: string) =>
      new SupCon({
        createBackbone: (rng) => createBackbone('mlp', { inChannels: 1, imageSize: 8, rng, mlpHidden: [16] }),
        numClasses: 3,
        rng: new Rng(3),
        args: resolveMethodArgs('supcon', { projHiddenDim: 8, projOutputDim: 4, ...(variant ? { variant } : {}) }),
      });
    const c = FIXTURE.cases[0]!;
    const loss = (m: SupCon) =>
      tf.tidy(
        () =>
          m
            .embeddingLoss(
              c.views.map((v) => tf.tensor2d(v)),
              tf.tensor1d(c.labels, 'int32'),
            )
            .loss.dataSync()[0]!,
      );
    const [byDefault, lin, lout] = [build(), build('in'), build('out')];
    assert.equal(byDefault.args.variant, 'in');
    assert.ok(Math.abs(loss(byDefault) - c.in.loss) <= 1e-5 * c.in.loss);
    assert.equal(loss(lin), loss(byDefault));
    assert.ok(Math.abs(loss(lout) - c.out.loss) <= 1e-5 * c.out.loss);
    for (const m of [byDefault, lin, lout]) m.dispose();
  });
});

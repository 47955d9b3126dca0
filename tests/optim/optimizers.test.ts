/**
 * SGD, LARS and AdamW against hand-written closed forms on small tensors (2-3 steps, with
 * momentum and weight decay), plus gradient lookup and skipping.
 */
import { strict as assert } from 'node:assert';
import { tf } from '../../src/core/tf.js';
import { AdamW, LARS, SGD, type ParamGroup } from '../../src/optim/index.js';
import { assertClose, disposeGrads, disposeParams, gradsOf, param, values } from './helpers.js';

const norm = (x: number[]) => Math.sqrt(x.reduce((s, v) => s + v * v, 0));
const axpy = (a: number, x: number[], y: number[]) => x.map((xi, i) => a * xi + y[i]!);
const scale = (a: number, x: number[]) => x.map((xi) => a * xi);

describe('optim: SGD (hand-computed)', () => {
  it('momentum and weight decay over 3 steps with a changing lr', () => {
    const w = param('w', [1, -2, 0.5, 3], [2, 2]);
    const opt = new SGD([{ name: 'g', params: [w], lr: 0.1, weightDecay: 0.01 }], { momentum: 0.9 });
    const gs = [
      [0.5, 0.25, -1, 2],
      [-1, 2, 0.1, 0.1],
      [0.3, -0.3, 0.2, 0],
    ];
    const lrs = [0.1, 0.05, 0.2];
    let p = [1, -2, 0.5, 3];
    let buf: number[] | undefined;
    for (let k = 0; k < 3; k++) {
      opt.groups[0]!.lr = lrs[k]!;
      const d = axpy(0.01, p, gs[k]!); // g + wd p
      buf = buf ? axpy(0.9, buf, d) : d; // first step: buf = d
      p = axpy(-lrs[k]!, buf, p);
      const grads = gradsOf([[w, gs[k]!]]);
      opt.step(grads);
      disposeGrads(grads);
      assertClose(values(w.variable), p, `step ${k}`);
    }
    // Step 1 by hand: d = [0.51, 0.23, -0.995, 2.03], p = p0 - 0.1 d.
    assertClose(values(opt.paramState('w')!.slots.momentum_buffer!), buf!, 'momentum buffer');
    assert.equal(opt.paramState('w')!.step, 3);
    opt.dispose();
    disposeParams([w]);
  });

  it('first step by hand: p1 = p0 - lr (g + wd p0)', () => {
    const w = param('w', [1, -2]);
    const opt = new SGD([{ name: 'g', params: [w], lr: 0.1, weightDecay: 0.01 }], { momentum: 0.9 });
    const grads = gradsOf([[w, [0.5, 0.25]]]);
    opt.step(grads);
    disposeGrads(grads);
    assertClose(values(w.variable), [1 - 0.1 * 0.51, -2 - 0.1 * 0.23], 'p1');
    opt.dispose();
    disposeParams([w]);
  });

  it('nesterov and dampening', () => {
    const a = param('a', [1, 2]);
    const b = param('b', [1, 2]);
    const nest = new SGD([{ name: 'g', params: [a], lr: 0.1, weightDecay: 0 }], { momentum: 0.9, nesterov: true });
    const damp = new SGD([{ name: 'g', params: [b], lr: 0.1, weightDecay: 0 }], { momentum: 0.9, dampening: 0.5 });
    const gs = [
      [1, -1],
      [0.5, 2],
    ];
    let pa = [1, 2];
    let pb = [1, 2];
    let bufA: number[] | undefined;
    let bufB: number[] | undefined;
    for (const g of gs) {
      bufA = bufA ? axpy(0.9, bufA, g) : g;
      pa = axpy(-0.1, axpy(0.9, bufA, g), pa); // nesterov: d = g + m buf
      bufB = bufB ? axpy(0.9, bufB, scale(0.5, g)) : g; // dampening not applied on the first step
      pb = axpy(-0.1, bufB, pb);
      const grads = gradsOf([
        [a, g],
        [b, g],
      ]);
      nest.step(grads);
      damp.step(grads);
      disposeGrads(grads);
    }
    assertClose(values(a.variable), pa, 'nesterov');
    assertClose(values(b.variable), pb, 'dampening');
    nest.dispose();
    damp.dispose();
    disposeParams([a, b]);
  });

  it('per-group momentum overrides the default; momentum 0 keeps no state', () => {
    const a = param('a', [1]);
    const b = param('b', [1]);
    const opt = new SGD(
      [
        { name: 'plain', params: [a], lr: 1, weightDecay: 0, momentum: 0 },
        { name: 'mom', params: [b], lr: 1, weightDecay: 0 },
      ],
      { momentum: 0.5 },
    );
    for (let k = 0; k < 2; k++) {
      const grads = gradsOf([
        [a, [1]],
        [b, [1]],
      ]);
      opt.step(grads);
      disposeGrads(grads);
    }
    assertClose(values(a.variable), [1 - 1 - 1], 'no momentum');
    assertClose(values(b.variable), [1 - 1 - 1.5], 'momentum 0.5');
    assert.deepEqual(Object.keys(opt.paramState('a')!.slots), []);
    opt.dispose();
    disposeParams([a, b]);
  });

  it('skips parameters without a gradient and ignores unknown gradients', () => {
    const a = param('a', [1, 1]);
    const b = param('b', [2, 2]);
    const stranger = tf.variable(tf.ones([3]));
    const opt = new SGD([{ name: 'g', params: [a, b], lr: 0.5, weightDecay: 0.1 }], { momentum: 0.9 });
    const grads = gradsOf([[a, [1, 1]]]);
    grads[stranger.name] = tf.ones([3]);
    opt.step(grads);
    disposeGrads(grads);
    assertClose(values(b.variable), [2, 2], 'b untouched (no weight decay either)');
    assert.equal(opt.paramState('b'), undefined);
    assertClose(values(a.variable), [1 - 0.5 * 1.1, 1 - 0.5 * 1.1], 'a');
    opt.dispose();
    disposeParams([a, b, stranger]);
  });

  it('accepts the output of tf.variableGrads and a Map keyed by variable', () => {
    const a = param('a', [1, 2]);
    const opt = new SGD([{ name: 'g', params: [a], lr: 0.1, weightDecay: 0 }], { momentum: 0 });
    // sum(x^2) with its gradient given by customGrad (independent of registered gradients).
    const sumSquares = tf.customGrad((...inputs) => {
      const x = inputs[0] as tf.Tensor;
      return { value: tf.sum(tf.square(x)), gradFunc: (dy: tf.Tensor) => tf.mul(dy, tf.mul(x, 2)) };
    });
    const { value, grads } = tf.variableGrads(() => sumSquares(a.variable) as tf.Scalar, [a.variable]);
    opt.step(grads); // d/da sum(a^2) = 2a
    assertClose(values(a.variable), [1 - 0.2, 2 - 0.4], 'record');
    opt.step(new Map([[a.variable, grads[a.variable.name]!]]));
    assertClose(values(a.variable), [0.8 - 0.2, 1.6 - 0.4], 'map');
    value.dispose();
    disposeGrads(grads);
    opt.dispose();
    disposeParams([a]);
  });

  it('rejects a gradient of the wrong shape and bad hyperparameters', () => {
    const a = param('a', [1, 2]);
    const opt = new SGD([{ name: 'g', params: [a], lr: 0.1, weightDecay: 0 }]);
    const grads = { [a.variable.name]: tf.ones([3]) };
    assert.throws(() => opt.step(grads), /gradient for 'a' has shape \[3\] but the parameter has shape \[2\]/);
    disposeGrads(grads);
    assert.throws(() => new SGD([{ name: 'g', params: [a], lr: -1, weightDecay: 0 }]), /lr of parameter group 0 \('g'\)/);
    assert.throws(() => new SGD([{ name: 'g', params: [a, { name: 'b', variable: a.variable }], lr: 1, weightDecay: 0 }]), /twice/);
    assert.throws(() => new SGD([{ name: 'g', params: [a], lr: 1, weightDecay: 0 }], { momentum: 0, nesterov: true }), /nesterov/);
    opt.dispose();
    disposeParams([a]);
  });
});

describe('optim: LARS (hand-computed)', () => {
  // p = [3, 4] (|p| = 5), g = [0.6, 0.8] (|g| = 1), wd = 0.1, eta = 0.02, eps = 0.
  const run = (lr: number, clipLr: boolean, group: Partial<ParamGroup> = {}, options = {}) => {
    const w = param('w', [3, 4], [2, 1]);
    const opt = new LARS([{ name: 'g', params: [w], lr, weightDecay: 0.1, ...group }], {
      momentum: 0.9,
      eta: 0.02,
      eps: 0,
      clipLr,
      ...options,
    });
    const grads = gradsOf([[w, [0.6, 0.8]]]);
    opt.step(grads);
    disposeGrads(grads);
    const out = values(w.variable);
    opt.dispose();
    disposeParams([w]);
    return out;
  };

  it('trust ratio eta |p| / (|g| + wd |p|) applied to g + wd p', () => {
    const trust = (0.02 * 5) / (1 + 0.1 * 5); // 1/15
    const d = [0.9 * trust, 1.2 * trust]; // g + wd p = [0.9, 1.2]
    assertClose(run(0.5, false), [3 - 0.5 * d[0]!, 4 - 0.5 * d[1]!], 'unclipped');
  });

  it('clipLr: trust / lr when below 1, else 1', () => {
    const t = 1 / 15 / 0.5; // 0.1333 < 1
    assertClose(run(0.5, true), [3 - 0.5 * 0.9 * t, 4 - 0.5 * 1.2 * t], 'trust/lr < 1');
    // lr = 0.01: trust / lr = 6.67 -> 1, i.e. plain SGD on g + wd p.
    assertClose(run(0.01, true), [3 - 0.01 * 0.9, 4 - 0.01 * 1.2], 'clipped at 1');
  });

  it('larsExclude on a group gives plain SGD without weight decay', () => {
    assertClose(run(0.5, false, { larsExclude: true }), [3 - 0.5 * 0.6, 4 - 0.5 * 0.8], 'excluded');
  });

  it('excludeBiasAndNorm: 1-D params get plain SGD without weight decay, others are adapted', () => {
    const bias = param('fc.bias', [1, 2]);
    const bn = param('bn.weight', [1, 1]);
    const w = param('fc.weight', [3, 4], [1, 2]);
    const opt = new LARS(
      [
        { name: 'decay', params: [w, bias], lr: 0.5, weightDecay: 0.1 },
        { name: 'forced', params: [bn], lr: 0.5, weightDecay: 0.1, larsExclude: false },
      ],
      { momentum: 0.9, eta: 0.02, eps: 0, excludeBiasAndNorm: true },
    );
    assert.equal(opt.isExcluded(bias, opt.groups[0]!), true);
    assert.equal(opt.isExcluded(w, opt.groups[0]!), false);
    assert.equal(opt.isExcluded(bn, opt.groups[1]!), false);
    let pb = [1, 2];
    let bufB: number[] | undefined;
    let pw = [3, 4];
    let bufW: number[] | undefined;
    let pn = [1, 1];
    let bufN: number[] | undefined;
    const lars = (pv: number[], g: number[]) => scale((0.02 * norm(pv)) / (norm(g) + 0.1 * norm(pv)), axpy(0.1, pv, g));
    const gsB = [
      [0.5, 0.5],
      [-1, 0.25],
    ];
    const gsW = [
      [0.6, 0.8],
      [0.3, -0.4],
    ];
    for (let k = 0; k < 2; k++) {
      bufB = bufB ? axpy(0.9, bufB, gsB[k]!) : gsB[k]!;
      pb = axpy(-0.5, bufB, pb);
      const g = gsW[k]!;
      const d = lars(pw, g);
      bufW = bufW ? axpy(0.9, bufW, d) : d;
      pw = axpy(-0.5, bufW, pw);
      const dn = lars(pn, [0.6, 0.8]);
      bufN = bufN ? axpy(0.9, bufN, dn) : dn;
      pn = axpy(-0.5, bufN, pn);
      const grads = gradsOf([
        [bias, gsB[k]!],
        [w, g],
        [bn, [0.6, 0.8]],
      ]);
      opt.step(grads);
      disposeGrads(grads);
    }
    assertClose(values(bias.variable), pb, 'bias: plain SGD with momentum');
    assertClose(values(w.variable), pw, 'weight: LARS');
    assertClose(values(bn.variable), pn, 'bn.weight with larsExclude: false: LARS');
    opt.dispose();
    disposeParams([bias, bn, w]);
  });

  it('zero gradient: no update, not even weight decay (solo-learn)', () => {
    const w = param('w', [1, 2], [1, 2]);
    const opt = new LARS([{ name: 'g', params: [w], lr: 0.5, weightDecay: 0.1 }], { momentum: 0.9 });
    const grads = gradsOf([[w, [0, 0]]]);
    opt.step(grads);
    disposeGrads(grads);
    assertClose(values(w.variable), [1, 2], 'unchanged');
    opt.dispose();
    disposeParams([w]);
  });

  it('zero parameter norm: d = g, without weight decay (solo-learn)', () => {
    const z = param('z', [0, 0], [1, 2]);
    const opt = new LARS([{ name: 'g', params: [z], lr: 0.5, weightDecay: 0.1 }], { momentum: 0.9 });
    const grads = gradsOf([[z, [1, -2]]]);
    opt.step(grads);
    disposeGrads(grads);
    assertClose(values(z.variable), [-0.5, 1], 'p = -lr g');
    opt.dispose();
    disposeParams([z]);
  });
});

describe('optim: AdamW (hand-computed)', () => {
  it('decoupled weight decay and bias correction over 3 steps', () => {
    const w = param('w', [1, -1, 0.5]);
    const lr = 0.01;
    const wd = 0.1;
    const [b1, b2, eps] = [0.9, 0.999, 1e-8];
    const opt = new AdamW([{ name: 'g', params: [w], lr, weightDecay: wd }]);
    const gs = [
      [0.1, -0.2, 0.3],
      [0.05, 0.1, -0.3],
      [-0.2, 0.0, 0.1],
    ];
    let p = [1, -1, 0.5];
    let m = [0, 0, 0];
    let v = [0, 0, 0];
    for (let t = 1; t <= 3; t++) {
      const g = gs[t - 1]!;
      p = scale(1 - lr * wd, p);
      m = m.map((mi, i) => b1 * mi + (1 - b1) * g[i]!);
      v = v.map((vi, i) => b2 * vi + (1 - b2) * g[i]! * g[i]!);
      const mHat = scale(1 / (1 - b1 ** t), m);
      const vHat = scale(1 / (1 - b2 ** t), v);
      p = p.map((pi, i) => pi - (lr * mHat[i]!) / (Math.sqrt(vHat[i]!) + eps));
      const grads = gradsOf([[w, g]]);
      opt.step(grads);
      disposeGrads(grads);
      assertClose(values(w.variable), p, `step ${t}`);
    }
    // First step: m_hat / sqrt(v_hat) = sign(g), so p1 = p0 (1 - lr wd) - lr sign(g).
    assertClose(values(opt.paramState('w')!.slots.exp_avg!), m, 'exp_avg');
    assertClose(values(opt.paramState('w')!.slots.exp_avg_sq!), v, 'exp_avg_sq');
    opt.dispose();
    disposeParams([w]);
  });

  it("bias correction counts each parameter's own updates", () => {
    const a = param('a', [1]);
    const b = param('b', [1]);
    const opt = new AdamW([{ name: 'g', params: [a, b], lr: 0.1, weightDecay: 0 }]);
    let grads = gradsOf([[a, [1]]]);
    opt.step(grads);
    disposeGrads(grads);
    grads = gradsOf([
      [a, [1]],
      [b, [1]],
    ]);
    opt.step(grads);
    disposeGrads(grads);
    // b's first update is a full first step: p = 1 - lr sign(g) (up to eps).
    assertClose(values(b.variable), [0.9], 'b', 1e-6);
    assert.equal(opt.paramState('a')!.step, 2);
    assert.equal(opt.paramState('b')!.step, 1);
    opt.dispose();
    disposeParams([a, b]);
  });
});

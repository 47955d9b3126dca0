/** Optimizer checkpoints (round trip, mismatch errors), tensor leaks, and createOptimizer. */
import { strict as assert } from 'node:assert';
import { UserError } from '../../src/core/errors.js';
import { tf } from '../../src/core/tf.js';
import { createOptimizer, OPTIMIZER_NAMES, type NamedParam, type Optimizer, type OptimizerState, type ParamGroup } from '../../src/optim/index.js';
import { disposeGrads, disposeParams, values } from './helpers.js';

const SHAPES: Record<string, number[]> = { 'enc.weight': [3, 2], 'enc.bias': [2], 'head.weight': [2, 2] };

function makeParams(init?: Map<string, number[]>): NamedParam[] {
  let seed = 1;
  const rand = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  return Object.entries(SHAPES).map(([name, shape]) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = init?.get(name) ?? Array.from({ length: n }, rand);
    return { name, variable: tf.variable(tf.tensor(data, shape), true) };
  });
}

function makeGroups(params: NamedParam[]): ParamGroup[] {
  return [
    { name: 'encoder', params: params.slice(0, 2), lr: 0.1, weightDecay: 1e-3 },
    { name: 'head', params: params.slice(2), lr: 0.05, weightDecay: 0, scheduled: false },
  ];
}

/** Deterministic gradients for step k; `skip` leaves enc.bias out on odd steps. */
function gradsFor(params: NamedParam[], k: number): tf.NamedTensorMap {
  const out: tf.NamedTensorMap = {};
  for (const p of params) {
    if (p.name === 'enc.bias' && k % 2 === 1) continue;
    const n = p.variable.size;
    out[p.variable.name] = tf.tensor(
      Array.from({ length: n }, (_, i) => Math.sin(k * 1.7 + i * 0.9 + p.name.length)),
      p.variable.shape,
    );
  }
  return out;
}

function stepWith(opt: Optimizer, params: NamedParam[], k: number): void {
  const grads = gradsFor(params, k);
  opt.step(grads);
  disposeGrads(grads);
}

/** Serialises like a checkpoint file would: plain arrays and JSON. */
function throughJson(state: OptimizerState): OptimizerState {
  const tensors = Object.fromEntries(Object.entries(state.tensors).map(([k, t]) => [k, tf.tensor(Array.from(t.dataSync()), t.shape)]));
  return { tensors, meta: JSON.parse(JSON.stringify(state.meta)) };
}

const OPTIONS = { momentum: 0.9, clipLr: true, excludeBiasAndNorm: true };

describe('optim: state dict', () => {
  for (const name of OPTIMIZER_NAMES) {
    it(`${name}: save after k steps, load into a fresh optimizer on cloned params, continue identically`, () => {
      const paramsA = makeParams();
      const optA = createOptimizer(name, makeGroups(paramsA), OPTIONS);
      for (let k = 0; k < 3; k++) {
        optA.setLr(0, 0.1 + 0.02 * k);
        stepWith(optA, paramsA, k);
      }
      const saved = throughJson(optA.stateDict());
      const slotCount = name === 'adamw' ? 2 : 1;
      assert.equal(Object.keys(saved.tensors).length, 3 * slotCount);
      assert.ok(`enc.weight.${name === 'adamw' ? 'exp_avg' : 'momentum_buffer'}` in saved.tensors);
      assert.equal(saved.meta.iterations, 3);
      assert.equal(saved.meta.params['enc.bias']!.step, 2);

      const paramsB = makeParams(new Map(paramsA.map((p) => [p.name, values(p.variable)])));
      const optB = createOptimizer(name, makeGroups(paramsB), OPTIONS);
      optB.loadStateDict(saved);
      Object.values(saved.tensors).forEach((t) => t.dispose());
      assert.equal(optB.getLr(0), optA.getLr(0));
      assert.equal(optB.iterations, 3);
      for (let k = 3; k < 5; k++) {
        stepWith(optA, paramsA, k);
        stepWith(optB, paramsB, k);
      }
      paramsA.forEach((p, i) => assert.deepEqual(values(paramsB[i]!.variable), values(p.variable), p.name));
      optA.dispose();
      optB.dispose();
      disposeParams([...paramsA, ...paramsB]);
    });
  }

  it('mismatches are UserErrors that say what differs, and change nothing', () => {
    const params = makeParams();
    const sgd = createOptimizer('sgd', makeGroups(params));
    stepWith(sgd, params, 0);
    const state = sgd.stateDict();
    const adam = createOptimizer('adamw', makeGroups(params));
    assert.throws(
      () => adam.loadStateDict(state),
      (e: unknown) => e instanceof UserError && /saved by 'sgd' but this optimizer is 'adamw'/.test(e.message),
    );

    const renamed = makeParams().map((p) => (p.name === 'head.weight' ? { ...p, name: 'head.w' } : p));
    const other = createOptimizer('sgd', makeGroups(renamed));
    assert.throws(() => other.loadStateDict(state), /group 'head' parameters differ: missing \[head\.w\], unexpected \[head\.weight\]/);

    const oneGroup = createOptimizer('sgd', [{ name: 'all', params: makeParams(), lr: 1, weightDecay: 0 }]);
    assert.throws(() => oneGroup.loadStateDict(state), /it has 2 parameter groups, this optimizer has 1/);

    const fresh = createOptimizer('sgd', makeGroups(makeParams()));
    const badShape = { ...state, tensors: { ...state.tensors, 'enc.bias.momentum_buffer': tf.zeros([3]) } };
    assert.throws(() => fresh.loadStateDict(badShape), /'enc\.bias\.momentum_buffer' has shape \[3\] but the parameter has shape \[2\]/);
    const extra = { ...state, tensors: { ...state.tensors, 'enc.bias.foo': tf.zeros([2]) } };
    assert.throws(() => fresh.loadStateDict(extra), /unexpected tensors \[enc\.bias\.foo\]/);
    assert.equal(fresh.paramState('enc.weight'), undefined, 'nothing loaded');
    badShape.tensors['enc.bias.momentum_buffer'].dispose();
    extra.tensors['enc.bias.foo'].dispose();

    for (const o of [sgd, adam, other, oneGroup, fresh]) {
      disposeParams(o.params());
      o.dispose();
    }
  });
});

describe('optim: memory', () => {
  for (const name of OPTIMIZER_NAMES) {
    it(`${name}: the number of live tensors does not grow over steps`, () => {
      const params = makeParams();
      const opt = createOptimizer(name, makeGroups(params), OPTIONS);
      stepWith(opt, params, 0);
      stepWith(opt, params, 1);
      const before = tf.memory().numTensors;
      for (let k = 2; k < 12; k++) stepWith(opt, params, k);
      assert.equal(tf.memory().numTensors, before);
      const withState = tf.memory().numTensors;
      opt.dispose();
      assert.equal(tf.memory().numTensors, withState - 3 * (name === 'adamw' ? 2 : 1), 'dispose frees the state');
      disposeParams(params);
    });
  }
});

describe('optim: createOptimizer', () => {
  it('creates each optimizer by name', () => {
    const params = makeParams();
    for (const name of OPTIMIZER_NAMES) {
      const opt = createOptimizer(name, makeGroups(params));
      assert.equal(opt.type, name);
      opt.dispose();
    }
    disposeParams(params);
  });

  it('an unknown name is a UserError naming the field, the value and the allowed values', () => {
    assert.throws(
      () => createOptimizer('rmsprop', []),
      (e: unknown) => e instanceof UserError && e.message === 'optimizer: "rmsprop" is not allowed; expected sgd | lars | adamw',
    );
  });
});

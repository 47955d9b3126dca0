/** Parameter groups and weight-decay exclusion (solo-learn's remove_bias_and_norm_from_weight_decay). */
import { strict as assert } from 'node:assert';
import { tf } from '../../src/core/tf.js';
import { excludeBiasAndNorm, isBiasOrNorm, splitWeightDecay, toNamedParams } from '../../src/optim/index.js';
import { disposeParams, param } from './helpers.js';

describe('optim: parameter groups', () => {
  const conv = param('conv.weight', new Array(8).fill(0.1), [2, 1, 2, 2]);
  const bias = param('conv.bias', [0, 0]);
  const gamma = param('bn.weight', [1, 1]);
  const scalar = param('temperature', [0.1], []);
  const fc = param('fc.weight', [1, 2, 3, 4], [2, 2]);
  after(() => disposeParams([conv, bias, gamma, scalar, fc]));

  it('rank <= 1 is a bias or norm weight', () => {
    assert.deepEqual(
      [conv, bias, gamma, scalar, fc].map((p) => isBiasOrNorm(p)),
      [false, true, true, true, false],
    );
    assert.equal(isBiasOrNorm(conv.variable), false);
  });

  it('splitWeightDecay: decayed group then `_no_decay` group with weightDecay 0', () => {
    const groups = splitWeightDecay([conv, bias, gamma, scalar, fc], {
      name: 'backbone',
      lr: 0.3,
      weightDecay: 1e-4,
      momentum: 0.9,
    });
    assert.deepEqual(
      groups.map((g) => [g.name, g.params.map((p) => p.name), g.weightDecay, g.lr, g.momentum]),
      [
        ['backbone', ['conv.weight', 'fc.weight'], 1e-4, 0.3, 0.9],
        ['backbone_no_decay', ['conv.bias', 'bn.weight', 'temperature'], 0, 0.3, 0.9],
      ],
    );
    assert.deepEqual(
      splitWeightDecay([bias], { name: 'b', lr: 1, weightDecay: 1 }).map((g) => g.name),
      ['b_no_decay'],
      'empty groups are left out',
    );
  });

  it('excludeBiasAndNorm splits every group and keeps other settings', () => {
    const groups = excludeBiasAndNorm([
      { name: 'backbone', params: [conv, bias], lr: 0.3, weightDecay: 1e-4 },
      { name: 'classifier', params: [fc, gamma], lr: 0.1, weightDecay: 0, scheduled: false },
    ]);
    assert.deepEqual(
      groups.map((g) => [g.name, g.params.map((p) => p.name), g.weightDecay, g.scheduled]),
      [
        ['backbone', ['conv.weight'], 1e-4, undefined],
        ['backbone_no_decay', ['conv.bias'], 0, undefined],
        ['classifier', ['fc.weight'], 0, false],
        ['classifier_no_decay', ['bn.weight'], 0, false],
      ],
    );
  });

  it('toNamedParams keeps trainable variables by default', () => {
    const frozen = tf.variable(tf.zeros([2]), false);
    const entries: Array<[string, tf.Variable]> = [
      ['a', conv.variable],
      ['b', frozen],
    ];
    assert.deepEqual(
      toNamedParams(entries).map((p) => p.name),
      ['a'],
    );
    assert.deepEqual(
      toNamedParams(entries, false).map((p) => p.name),
      ['a', 'b'],
    );
    frozen.dispose();
  });
});

import { strict as assert } from 'node:assert';
import { UserError } from '../../src/core/errors.js';
import {
  allowedValues,
  BarlowTwins,
  BYOL,
  defineArgs,
  describeMethods,
  describeRange,
  formatArgs,
  MomentumMethod,
  registerMethod,
  resolveMethodArgs,
  SimCLR,
  type ArgSpec,
  type ArgValue,
  type ArgValues,
  type NumericArgSpec,
} from '../../src/methods/index.js';
import { parseMethodArg, readConfigFile } from '../../src/experiment/config.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from '../helpers/run.js';

/** A user subclass as in examples/my-simclr.ts: SimCLR's arguments plus one. */
class WeightedSimCLR extends SimCLR {
  static override readonly args = defineArgs({
    ...SimCLR.args,
    varianceWeight: { kind: 'float', default: 1, ge: 0, description: 'weight of the variance term' },
  });
  declare readonly args: ArgValues<typeof WeightedSimCLR.args>;
}
registerMethod('weighted_simclr_args_test', WeightedSimCLR);

// Compile-time: `this.args` is typed per method (never called).
const typed = (m: WeightedSimCLR, b: BYOL): number[] => [
  m.args.temperature,
  m.args.varianceWeight,
  b.args.baseTau,
  b.args.predHiddenDim,
  // @ts-expect-error SimCLR has no lambd
  m.args.lambd,
];
void typed;

/** Asserts that `fn` throws a UserError whose message matches `pattern`. */
function throwsUser(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof UserError, `a UserError, got ${String(e)}`);
    assert.match(e.message, pattern);
    return true;
  });
}

describe('method arguments', () => {
  it('defaults are unchanged (values and order, as written to config.json)', () => {
    const expected: Record<string, Record<string, number>> = {
      simclr: { projHiddenDim: 2048, projOutputDim: 256, temperature: 0.2 },
      barlow_twins: { projHiddenDim: 2048, projOutputDim: 2048, lambd: 0.0051, scaleLoss: 0.1 },
      byol: { baseTau: 0.99, finalTau: 1.0, projHiddenDim: 4096, projOutputDim: 256, predHiddenDim: 4096 },
    };
    for (const [name, defaults] of Object.entries(expected)) {
      const resolved = resolveMethodArgs(name, {});
      assert.deepEqual(resolved, defaults, name);
      assert.equal(JSON.stringify(resolved), JSON.stringify(defaults), `${name}: key order`);
    }
  });

  it('overrides replace defaults in place and keep the declaration order', () => {
    assert.equal(
      JSON.stringify(resolveMethodArgs('byol', { predHiddenDim: 8, baseTau: 0.9 })),
      JSON.stringify({ baseTau: 0.9, finalTau: 1, projHiddenDim: 4096, projOutputDim: 256, predHiddenDim: 8 }),
    );
  });

  it("subclasses inherit their parent's declarations", () => {
    assert.deepEqual(Object.keys(BYOL.args), ['baseTau', 'finalTau', 'projHiddenDim', 'projOutputDim', 'predHiddenDim']);
    assert.equal(BYOL.args.baseTau, MomentumMethod.args.baseTau, 'the same declaration, not a copy');
    assert.equal(BYOL.args.finalTau, MomentumMethod.args.finalTau);
    assert.deepEqual(Object.keys(WeightedSimCLR.args), ['projHiddenDim', 'projOutputDim', 'temperature', 'varianceWeight']);
    assert.equal(WeightedSimCLR.args.temperature, SimCLR.args.temperature);
    assert.ok(!('varianceWeight' in SimCLR.args), 'the parent is untouched');
    assert.deepEqual(resolveMethodArgs('weighted_simclr_args_test', {}), { projHiddenDim: 2048, projOutputDim: 256, temperature: 0.2, varianceWeight: 1 });
    assert.equal(resolveMethodArgs('weighted_simclr_args_test', { varianceWeight: 0.5 }).varianceWeight, 0.5);
    throwsUser(() => resolveMethodArgs('simclr', { varianceWeight: 0.5 }), /method_args.varianceWeight: not a hyperparameter of method 'simclr'/);
  });

  it('a subclass may change an inherited default', () => {
    class Warmer extends SimCLR {
      static override readonly args = defineArgs({ ...SimCLR.args, temperature: { ...SimCLR.args.temperature, default: 0.5 } });
    }
    registerMethod('warmer_args_test', Warmer);
    assert.equal(resolveMethodArgs('warmer_args_test', {}).temperature, 0.5);
    assert.equal(SimCLR.args.temperature.default, 0.2);
    throwsUser(() => resolveMethodArgs('warmer_args_test', { temperature: 0 }), /method_args.temperature: 0 is not allowed; expected a number > 0/);
  });

  describe('validation: user errors naming method_args.<name>, the value and what is allowed', () => {
    const CASES: Array<[string, string, Record<string, ArgValue>, RegExp]> = [
      [
        "unknown name, listing the method's",
        'simclr',
        { lambd: 1 },
        /^method_args.lambd: not a hyperparameter of method 'simclr'; it has projHiddenDim, projOutputDim, temperature \(see ssl-train methods\)$/,
      ],
      ['integer given a fraction', 'simclr', { projHiddenDim: 2.5 }, /^method_args.projHiddenDim: 2.5 is not allowed; expected an integer >= 1$/],
      ['integer below its range', 'byol', { predHiddenDim: 0 }, /^method_args.predHiddenDim: 0 is not allowed; expected an integer >= 1$/],
      ['temperature 0', 'simclr', { temperature: 0 }, /^method_args.temperature: 0 is not allowed; expected a number > 0$/],
      ['negative temperature', 'simclr', { temperature: -0.1 }, /^method_args.temperature: -0.1 is not allowed; expected a number > 0$/],
      ['negative lambd', 'barlow_twins', { lambd: -0.01 }, /^method_args.lambd: -0.01 is not allowed; expected a number >= 0$/],
      ['scaleLoss 0', 'barlow_twins', { scaleLoss: 0 }, /^method_args.scaleLoss: 0 is not allowed; expected a number > 0$/],
      ['baseTau above 1', 'byol', { baseTau: 1.5 }, /^method_args.baseTau: 1.5 is not allowed; expected a number in \[0, 1\]$/],
      ['finalTau below 0', 'byol', { finalTau: -0.1 }, /^method_args.finalTau: -0.1 is not allowed; expected a number in \[0, 1\]$/],
      ['not finite', 'simclr', { temperature: Infinity }, /^method_args.temperature: .* is not allowed; expected a number > 0$/],
      ['not a number', 'simclr', { temperature: '0.2' }, /^method_args.temperature: "0.2" is not allowed; expected a number > 0$/],
      ['a boolean given 1 (booleans are true or false)', 'dino', { useBnInHead: 1 }, /^method_args.useBnInHead: 1 is not allowed; expected true or false$/],
      ['a boolean given 0', 'mocov2plus', { useBnInProjector: 0 }, /^method_args.useBnInProjector: 0 is not allowed; expected true or false$/],
      ['a boolean given a word', 'vibcreg', { iternorm: 'yes' }, /^method_args.iternorm: "yes" is not allowed; expected true or false$/],
      ['a number given a boolean', 'simclr', { temperature: true }, /^method_args.temperature: true is not allowed; expected a number > 0$/],
      ['a choice not among the choices', 'supcon', { variant: 'both' }, /^method_args.variant: "both" is not allowed; expected one of in, out$/],
    ];
    for (const [what, method, overrides, pattern] of CASES) {
      it(what, () => throwsUser(() => resolveMethodArgs(method, overrides), pattern));
    }

    it('boundaries: inclusive bounds are allowed, exclusive ones are not', () => {
      assert.equal(resolveMethodArgs('byol', { baseTau: 0, finalTau: 1 }).baseTau, 0);
      assert.equal(resolveMethodArgs('barlow_twins', { lambd: 0 }).lambd, 0);
      assert.equal(resolveMethodArgs('simclr', { projHiddenDim: 1, temperature: 1e-9 }).projHiddenDim, 1);
    });
  });

  it('booleans are true or false, choices are words: --method-arg, YAML method_args and the resolved values', () => {
    assert.deepEqual(parseMethodArg('useBnInHead=true'), ['useBnInHead', true]);
    assert.deepEqual(parseMethodArg('use_bn_in_projector=false'), ['useBnInProjector', false]);
    assert.deepEqual(parseMethodArg('variant=out'), ['variant', 'out']);
    assert.deepEqual(parseMethodArg('temperature=0.2'), ['temperature', 0.2]);
    throwsUser(
      () => parseMethodArg('variant=Out!'),
      /^--method-arg: "variant=Out!" is not allowed; expected name=value with a number, true or false, or a word/,
    );
    const file = join(tempDir(), 'recipe.yaml');
    writeFileSync(file, 'method: dino\nmethod_args:\n  use_bn_in_head: true\n  num_prototypes: 64\n');
    assert.deepEqual(readConfigFile(file).methodArgs, { useBnInHead: true, numPrototypes: 64 });
    assert.equal(resolveMethodArgs('dino', { useBnInHead: true }).useBnInHead, true);
    assert.equal(resolveMethodArgs('dino', {}).useBnInHead, false);
    assert.equal(resolveMethodArgs('vibcreg', { iternorm: false }).iternorm, false);
    assert.equal(resolveMethodArgs('supcon', {}).variant, 'in');
    assert.equal(resolveMethodArgs('supcon', { variant: 'out' }).variant, 'out');
  });

  it('rejects malformed declarations when the class is defined', () => {
    const spec = (extra: Partial<NumericArgSpec>): NumericArgSpec => ({ kind: 'float', default: 1, description: 'x', ...extra });
    assert.throws(() => defineArgs({ a: spec({ default: -1, ge: 0 }) }), /method argument 'a': default -1 is not a number >= 0/);
    assert.throws(() => defineArgs({ a: spec({ kind: 'int', default: 0.5 }) }), /method argument 'a': default 0.5 is not an integer/);
    assert.throws(() => defineArgs({ a: spec({ ge: 0, gt: 0 }) }), /give ge or gt, not both/);
    assert.throws(() => defineArgs({ a: spec({ le: 2, lt: 2 }) }), /give le or lt, not both/);
    assert.throws(() => defineArgs({ a: spec({ kind: 'text' as 'int' }) }), /kind must be one of float, int, bool, choice/);
    assert.throws(() => defineArgs({ a: { kind: 'bool', default: 1 as unknown as boolean, description: 'x' } }), /default 1 is not true or false/);
    const choice = (choices: string[], value = choices[0]!): ArgSpec => ({ kind: 'choice', default: value, choices, description: 'x' });
    assert.throws(() => defineArgs({ a: choice(['in']) }), /choices must be at least two lower-case words/);
    assert.throws(() => defineArgs({ a: choice(['true', 'false']) }), /choices must be at least two lower-case words/);
    assert.throws(() => defineArgs({ a: choice(['in', 'out'], 'up') }), /default "up" is not one of in, out/);
    assert.throws(() => defineArgs({ a: spec({ description: ' ' }) }), /needs a one-line description/);
    assert.throws(() => defineArgs({ scale_loss: spec({}) }), /method argument 'scale_loss': names are camelCase/);
    assert.ok(Object.isFrozen(defineArgs({ a: spec({}) })));
  });

  it('refuses a class that still declares static defaultArgs (it would be ignored)', () => {
    class Legacy extends SimCLR {
      static readonly defaultArgs = { ...SimCLR.args, varianceWeight: 1 };
    }
    assert.throws(
      () => registerMethod('legacy_args_test', Legacy),
      /method 'legacy_args_test' \(Legacy\) has static defaultArgs; declare its hyperparameters as static args = defineArgs/,
    );
  });

  it('words ranges for tables and messages', () => {
    const words = (s: Partial<NumericArgSpec>) => {
      const full: ArgSpec = { kind: 'float', default: 0.5, description: 'x', ...s };
      return [describeRange(full), allowedValues(full)];
    };
    const flag: ArgSpec = { kind: 'bool', default: false, description: 'x' };
    assert.deepEqual([describeRange(flag), allowedValues(flag)], ['true|false', 'true or false']);
    const choice: ArgSpec = { kind: 'choice', default: 'in', choices: ['in', 'out'], description: 'x' };
    assert.deepEqual([describeRange(choice), allowedValues(choice)], ['in|out', 'one of in, out']);
    assert.deepEqual(words({}), ['any', 'a number']);
    assert.deepEqual(words({ kind: 'int', default: 1 }), ['any', 'an integer']);
    assert.deepEqual(words({ gt: 0 }), ['> 0', 'a number > 0']);
    assert.deepEqual(words({ le: 1 }), ['<= 1', 'a number <= 1']);
    assert.deepEqual(words({ lt: 1 }), ['< 1', 'a number < 1']);
    assert.deepEqual(words({ ge: 0, le: 1 }), ['[0, 1]', 'a number in [0, 1]']);
    assert.deepEqual(words({ gt: 0, lt: 1 }), ['(0, 1)', 'a number in (0, 1)']);
    assert.deepEqual(words({ gt: 0, le: 1 }), ['(0, 1]', 'a number in (0, 1]']);
  });

  it('lists every registered method with its arguments (user subclasses included)', () => {
    const text = describeMethods();
    for (const [name, cls] of [
      ['simclr', SimCLR],
      ['barlow_twins', BarlowTwins],
      ['byol', BYOL],
      ['weighted_simclr_args_test', WeightedSimCLR],
    ] as const) {
      assert.match(text, new RegExp(`^${name} \\(${cls.name}\\)$`, 'm'), `${name} listed`);
      const block = describeMethods([name]); // its own block: other methods may share an argument's description
      for (const [arg, spec] of Object.entries(cls.args)) {
        const line = block.split('\n').find((l) => l.trim().startsWith(`${arg} `) && l.includes(spec.description));
        assert.ok(line, `${name}.${arg} listed`);
        assert.deepEqual(line.trim().split(/\s{2,}/), [arg, spec.kind, String(spec.default), describeRange(spec), spec.description]);
      }
    }
    assert.match(text, /^\s+temperature\s+float\s+0\.2\s+> 0\s+softmax temperature of NT-Xent$/m);
    assert.match(text, /^\s+baseTau\s+float\s+0\.99\s+\[0, 1\]\s+/m);
    assert.match(text, /^\s+varianceWeight\s+float\s+1\s+>= 0\s+weight of the variance term$/m);
    const byolOnly = describeMethods(['byol']);
    assert.match(
      byolOnly,
      /^byol \(BYOL\)\n {2}paper: {2}Grill et al\. 2020, .*\n {2}recipe: lars, lr 1, classifier lr 0\.1, weight decay 0\.00001; views 'byol'; 2 global crops\n {2}labels: not used.*\n\s+name\s+kind\s+default\s+range\s+description\n/,
    );
    assert.doesNotMatch(byolOnly, /simclr/);
    throwsUser(() => describeMethods(['nope']), /method: "nope" is not allowed; expected one of/);
    assert.deepEqual(formatArgs({}), ['  (no hyperparameters)']);
  });
});

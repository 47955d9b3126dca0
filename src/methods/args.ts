import { invalidValue, UserError } from '../core/errors.js';

/** The kind of a method argument: any finite number, an integer, a boolean, or one of named choices. */
export type ArgKind = 'float' | 'int' | 'bool' | 'choice';

/** The value of one method argument (`--method-arg name=value`, YAML `method_args`). */
export type ArgValue = number | boolean | string;

interface ArgSpecBase {
  /** One line: what the argument does. */
  readonly description: string;
}

/** A numeric argument; bounds are optional, `ge`/`le` inclusive, `gt`/`lt` exclusive (at most one of each side). */
export interface NumericArgSpec extends ArgSpecBase {
  readonly kind: 'float' | 'int';
  readonly default: number;
  readonly ge?: number;
  readonly gt?: number;
  readonly le?: number;
  readonly lt?: number;
}

/** An on/off argument: `true` or `false` (YAML booleans; `--method-arg name=true`). Numbers are refused. */
export interface BoolArgSpec extends ArgSpecBase {
  readonly kind: 'bool';
  readonly default: boolean;
}

/** An argument that names one of `choices` (lower-case words, e.g. SupCon's `variant`: `in` or `out`). */
export interface ChoiceArgSpec extends ArgSpecBase {
  readonly kind: 'choice';
  readonly default: string;
  readonly choices: readonly string[];
}

/**
 * One hyperparameter of a method, declared once: validation of `--method-arg` and
 * `method_args`, `ssl-train methods` and the method's defaults all come from it.
 */
export type ArgSpec = NumericArgSpec | BoolArgSpec | ChoiceArgSpec;

/** A method's argument declarations, by (camelCase) name. */
export type ArgSpecs = { readonly [name: string]: ArgSpec };

/** The value type of one declaration: a number, a boolean, or (a choice) a string, one of its choices once resolved. */
export type ValueOf<A extends ArgSpec> = A extends BoolArgSpec ? boolean : A extends ChoiceArgSpec ? string : number;

/** The values of declared arguments, one per name, typed by kind. */
export type ArgValues<S extends ArgSpecs> = { [K in keyof S]: ValueOf<S[K]> };

const KINDS: readonly ArgKind[] = ['float', 'int', 'bool', 'choice'];
const CHOICE = /^[a-z][a-z0-9_-]*$/;

/**
 * Declares a method's arguments (a subclass spreads its parent's first:
 * `defineArgs({ ...SimCLR.args, varianceWeight: { kind: 'float', default: 1, ge: 0, description: '...' } })`).
 * A malformed declaration (unknown kind, both `ge` and `gt`, a default outside its own
 * range, ...) is a programming error, thrown when the class is defined.
 */
export function defineArgs<S extends ArgSpecs>(specs: S): S {
  for (const [name, spec] of Object.entries(specs)) {
    const fail = (why: string) => new Error(`method argument '${name}': ${why}`);
    if (!/^[a-z][A-Za-z0-9]*$/.test(name)) throw fail('names are camelCase letters and digits (--method-arg and method_args camelCase what users type)');
    if (!KINDS.includes(spec.kind)) throw fail(`kind must be one of ${KINDS.join(', ')}, not ${JSON.stringify(spec.kind)}`);
    if (spec.kind === 'float' || spec.kind === 'int') {
      if (spec.ge !== undefined && spec.gt !== undefined) throw fail('give ge or gt, not both');
      if (spec.le !== undefined && spec.lt !== undefined) throw fail('give le or lt, not both');
      for (const bound of ['ge', 'gt', 'le', 'lt'] as const) {
        if (spec[bound] !== undefined && !Number.isFinite(spec[bound])) throw fail(`${bound} must be a finite number`);
      }
    }
    if (spec.kind === 'choice') {
      const bad = Array.isArray(spec.choices) ? spec.choices.find((c) => !CHOICE.test(c) || c === 'true' || c === 'false') : spec.choices;
      if (!Array.isArray(spec.choices) || spec.choices.length < 2 || bad !== undefined) {
        throw fail(`choices must be at least two lower-case words (not true or false), got ${JSON.stringify(spec.choices)}`);
      }
    }
    if (typeof spec.description !== 'string' || spec.description.trim() === '') throw fail('needs a one-line description');
    if (!allows(spec, spec.default)) throw fail(`default ${JSON.stringify(spec.default)} is not ${allowedValues(spec)}`);
  }
  return Object.freeze({ ...specs });
}

/** Whether `value` is of the argument's kind (a number, a boolean, one of the choices) and inside its range. */
export function allows(spec: ArgSpec, value: ArgValue): boolean {
  if (spec.kind === 'bool') return typeof value === 'boolean';
  if (spec.kind === 'choice') return typeof value === 'string' && spec.choices.includes(value);
  if (typeof value !== 'number' || !Number.isFinite(value)) return false;
  if (spec.kind === 'int' && !Number.isInteger(value)) return false;
  if (spec.ge !== undefined && !(value >= spec.ge)) return false;
  if (spec.gt !== undefined && !(value > spec.gt)) return false;
  if (spec.le !== undefined && !(value <= spec.le)) return false;
  if (spec.lt !== undefined && !(value < spec.lt)) return false;
  return true;
}

/** The range alone: `> 0`, `>= 1`, `[0, 1]`, `(0, 1]`, `any` when unbounded, `true|false`, or the choices (`in|out`). */
export function describeRange(spec: ArgSpec): string {
  if (spec.kind === 'bool') return 'true|false';
  if (spec.kind === 'choice') return spec.choices.join('|');
  const low = spec.ge ?? spec.gt;
  const high = spec.le ?? spec.lt;
  if (low !== undefined && high !== undefined) {
    return `${spec.ge !== undefined ? '[' : '('}${low}, ${high}${spec.le !== undefined ? ']' : ')'}`;
  }
  if (low !== undefined) return `${spec.ge !== undefined ? '>=' : '>'} ${low}`;
  if (high !== undefined) return `${spec.le !== undefined ? '<=' : '<'} ${high}`;
  return 'any';
}

/** What the argument accepts, in words: "an integer >= 1", "a number in [0, 1]", "a number", "true or false", "one of in, out". */
export function allowedValues(spec: ArgSpec): string {
  if (spec.kind === 'bool') return 'true or false';
  if (spec.kind === 'choice') return `one of ${spec.choices.join(', ')}`;
  const kind = spec.kind === 'int' ? 'an integer' : 'a number';
  const range = describeRange(spec);
  if (range === 'any') return kind;
  return range.startsWith('[') || range.startsWith('(') ? `${kind} in ${range}` : `${kind} ${range}`;
}

/** The declared defaults. */
export function defaultsOf<S extends ArgSpecs>(specs: S): ArgValues<S> {
  return Object.fromEntries(Object.entries(specs).map(([name, spec]) => [name, spec.default])) as ArgValues<S>;
}

/**
 * The arguments of `method`: its defaults overridden by `overrides`, in declaration order.
 * A name it does not declare, a value of the wrong kind (a number for a boolean included) or
 * outside the range is a user error naming `method_args.<name>`, the value and what is allowed.
 */
export function resolveArgs<S extends ArgSpecs>(specs: S, overrides: Readonly<Record<string, ArgValue>>, method: string): ArgValues<S> {
  for (const [name, value] of Object.entries(overrides)) {
    const spec = Object.prototype.hasOwnProperty.call(specs, name) ? specs[name] : undefined;
    if (!spec) {
      const names = Object.keys(specs);
      throw new UserError(`method_args.${name}: not a hyperparameter of method '${method}'; it has ${names.join(', ') || 'none'} (see ssl-train methods)`);
    }
    if (!allows(spec, value)) throw invalidValue(`method_args.${name}`, value, allowedValues(spec));
  }
  return { ...defaultsOf(specs), ...overrides } as ArgValues<S>;
}

/**
 * A `--method-arg` value as typed: `true`/`false` are booleans, a finite number is a number,
 * a lower-case word is a choice; anything else is undefined. {@link resolveArgs} then checks
 * it against the argument's kind.
 */
export function parseArgValue(text: string): ArgValue | undefined {
  if (text === 'true' || text === 'false') return text === 'true';
  const value = Number(text);
  if (text.trim() !== '' && Number.isFinite(value)) return value;
  return CHOICE.test(text) ? text : undefined;
}

/**
 * A table of the arguments, one line each (name, kind, default, allowed range,
 * description), indented by `indent`; `(no hyperparameters)` when there are none.
 */
export function formatArgs(specs: ArgSpecs, indent = '  '): string[] {
  const entries = Object.entries(specs);
  if (entries.length === 0) return [`${indent}(no hyperparameters)`];
  const rows = [
    ['name', 'kind', 'default', 'range', 'description'],
    ...entries.map(([name, spec]) => [name, spec.kind, String(spec.default), describeRange(spec), spec.description]),
  ];
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
  return rows.map((r) => indent + r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]))).join('  '));
}

import { invalidValue, UserError } from '../core/errors.js';
import type { BaseMethod, MethodArgs, MethodContext, OptimDefaults } from './base.js';
import { BarlowTwins } from './barlow-twins.js';
import { BYOL } from './byol.js';
import { SimCLR } from './simclr.js';

/** A method class: constructible from a context, with its defaults as statics. */
export interface MethodClass {
  new (ctx: MethodContext): BaseMethod;
  readonly defaultArgs: MethodArgs;
  readonly optimDefaults: OptimDefaults;
  readonly viewRecipe: 'simclr' | 'byol' | 'barlow';
}

const registry = new Map<string, MethodClass>();

/**
 * Makes a method available to `--method name` (built-ins and user subclasses alike).
 * Registering a name twice replaces the earlier class.
 */
export function registerMethod(name: string, cls: MethodClass): void {
  if (!/^[a-z][a-z0-9_-]*$/.test(name)) throw new Error(`method name '${name}' must be lower-case letters, digits, - or _`);
  registry.set(name, cls);
}

/** Names of every registered method. */
export function methodNames(): string[] {
  return [...registry.keys()].sort();
}

/** The class registered as `name`; a user error naming the allowed names if none. */
export function getMethodClass(name: string): MethodClass {
  const cls = registry.get(name);
  if (!cls) throw invalidValue('method', name, `one of ${methodNames().join(', ')}`);
  return cls;
}

/**
 * The method's hyperparameters: its defaults overridden by `overrides`. A name the
 * method does not have is a user error listing the ones it has.
 */
export function resolveMethodArgs(name: string, overrides: MethodArgs): MethodArgs {
  const { defaultArgs } = getMethodClass(name);
  for (const [key, value] of Object.entries(overrides)) {
    if (!(key in defaultArgs)) {
      throw new UserError(
        `method_args.${key}: not a hyperparameter of method '${name}'; it has ${Object.keys(defaultArgs).join(', ') || 'none'}`,
      );
    }
    if (!Number.isFinite(value)) throw invalidValue(`method_args.${key}`, value, 'a finite number');
  }
  return { ...defaultArgs, ...overrides };
}

registerMethod('simclr', SimCLR);
registerMethod('barlow_twins', BarlowTwins);
registerMethod('byol', BYOL);

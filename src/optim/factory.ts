/** Creating an optimizer by name (from a config or a command-line flag). */
import { invalidValue } from '../core/errors.js';
import { AdamW, type AdamWOptions } from './adamw.js';
import { LARS, type LARSOptions } from './lars.js';
import { OPTIMIZER_NAMES, type Optimizer } from './optimizer.js';
import type { ParamGroup } from './params.js';
import { SGD } from './sgd.js';

/** Options of every optimizer; each reads its own (`eps` is shared by LARS and AdamW). */
export type OptimizerOptions = LARSOptions & AdamWOptions;

/**
 * Creates `sgd` ({@link SGD}), `lars` ({@link LARS}) or `adamw` ({@link AdamW}) over
 * `groups`. An unknown name is a `UserError` naming the field `optimizer`, the value and
 * the allowed names.
 */
export function createOptimizer(name: string, groups: ParamGroup[], options: OptimizerOptions = {}): Optimizer {
  switch (name) {
    case 'sgd':
      return new SGD(groups, options);
    case 'lars':
      return new LARS(groups, options);
    case 'adamw':
      return new AdamW(groups, options);
    default:
      throw invalidValue('optimizer', name, OPTIMIZER_NAMES.join(' | '));
  }
}

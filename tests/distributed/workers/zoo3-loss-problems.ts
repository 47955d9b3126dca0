/**
 * Deliberately WRONG distributed variants of the zoo3 losses, used only as negative controls by
 * tests/distributed/losses.full.test.ts (they live here, in the tests, never in src):
 * - `simdino-local-coding-rate`: SimDINO's coding rate of this rank's own Gram matrix (the
 *   reference implementation's default, `reduce_cov=0`).
 * Each is the real loss called with a one-process group, on this rank's inputs.
 */
import { SingleProcessGroup } from '../../../src/core/process-group.js';
import { caseLossSpec, type CaseLossFn } from '../../../src/verify/index.js';

export const ZOO3_WRONG_VARIANTS = ['simdino-local-coding-rate'] as const;
export type Zoo3WrongVariant = (typeof ZOO3_WRONG_VARIANTS)[number];

/** The case each wrong variant is checked against. */
export const ZOO3_WRONG_VARIANT_OF: Record<Zoo3WrongVariant, string> = {
  'simdino-local-coding-rate': 'simdino',
};

/** The file's loss on this rank's batch alone. */
const local: CaseLossFn = (c, x) => caseLossSpec(c.loss)!.run(c, x, new SingleProcessGroup());

export const ZOO3_WRONG: Record<Zoo3WrongVariant, CaseLossFn> = {
  'simdino-local-coding-rate': local,
};

/**
 * Every deliberately wrong variant of a whole case (workers/zoo-loss-problems.ts,
 * workers/zoo2-loss-problems.ts, workers/zoo3-loss-problems.ts), with the case of tests/fixtures/losses/cases.json it is
 * checked against (tests/distributed/losses.full.test.ts and its worker).
 */
import type { CaseLossFn } from '../../../src/verify/index.js';
import { WRONG_VARIANT_OF, WRONG_VARIANTS } from './zoo-loss-problems.js';
import { ZOO2_WRONG, ZOO2_WRONG_VARIANT_OF } from './zoo2-loss-problems.js';
import { ZOO3_WRONG, ZOO3_WRONG_VARIANT_OF } from './zoo3-loss-problems.js';

export const CASE_CONTROLS: Record<string, { fn: CaseLossFn; against: string }> = {
  ...Object.fromEntries(Object.entries(WRONG_VARIANTS).map(([v, fn]) => [v, { fn, against: WRONG_VARIANT_OF[v as keyof typeof WRONG_VARIANT_OF] }])),
  ...Object.fromEntries(Object.entries(ZOO2_WRONG).map(([v, fn]) => [v, { fn, against: ZOO2_WRONG_VARIANT_OF[v as keyof typeof ZOO2_WRONG_VARIANT_OF] }])),
  ...Object.fromEntries(Object.entries(ZOO3_WRONG).map(([v, fn]) => [v, { fn, against: ZOO3_WRONG_VARIANT_OF[v as keyof typeof ZOO3_WRONG_VARIANT_OF] }])),
};

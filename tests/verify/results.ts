/** A hand-made {@link VerifyResult} for the report's tests. */
import type { VerifyResult, VerifyStep } from '../../src/verify/harness.js';

/**
 * A failed one-step result whose continuous columns sit well within their 1e-5 bounds, with
 * `compared` (a step's decisions or ReLU branches) and its `worst` ratio.
 */
export function oneStepResult(compared: Pick<VerifyStep, 'decisions' | 'branches'>, worst: number): VerifyResult {
  const step: VerifyStep = {
    step: 1,
    loss: 1e-7,
    gradients: 1e-6,
    parameters: 1e-7,
    gradientsTensor: 'a',
    parametersTensor: 'b',
    lossBound: 1e-5,
    gradientsBound: 1e-5,
    parametersBound: 1e-5,
    ...compared,
  };
  return { worldSize: 2, steps: [step], worst, tolerance: 1e-5, roundoffFactor: 4, passed: false };
}

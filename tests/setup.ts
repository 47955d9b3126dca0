import { initEngine } from '../src/core/engine.js';

/**
 * Mocha root hooks: every test file runs on the default CPU engine (native kernels where
 * built). Tests that compare engines switch explicitly.
 */
export const mochaHooks = {
  async beforeAll(): Promise<void> {
    await initEngine('cpu');
  },
};

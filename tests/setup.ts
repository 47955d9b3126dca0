import type { Context, Suite } from 'mocha';
import { initEngine } from '../src/core/engine.js';

/** A mocha suite's own `before` hooks, in the order they run (mocha 11's private field). */
function beforeHooks(suite: Suite): unknown[] | undefined {
  return (suite as unknown as { _beforeAll?: unknown[] })._beforeAll;
}

/**
 * Mocha root hooks: every test file starts on the default CPU engine (native kernels where
 * built), whatever engine the file before it switched to (cpu-js, webgpu) and left behind:
 * the first top-level suite of each file gets, as its first `before` hook, a switch back to
 * `cpu`. (A file that switched and forgot to switch back used to run the next files on
 * tfjs's JS kernels, several times slower, and their exact comparisons on another engine
 * than they meant.) Tests that compare engines switch explicitly.
 */
export const mochaHooks = {
  async beforeAll(this: Context): Promise<void> {
    await initEngine('cpu');
    const root = this.test?.parent;
    if (!root) throw new Error('tests/setup: the root hook has no root suite');
    let previousFile: string | undefined;
    for (const suite of root.suites) {
      if (suite.file === previousFile) continue;
      previousFile = suite.file;
      const hooks = beforeHooks(suite);
      if (!Array.isArray(hooks)) throw new Error("tests/setup: mocha no longer keeps a suite's before hooks in _beforeAll");
      suite.beforeAll('start on the default cpu engine', async () => {
        await initEngine('cpu');
      });
      hooks.unshift(hooks.pop());
    }
  },
};

/**
 * The training page's worker (examples/browser/train-worker.js) in headless Chromium: the same
 * run (SimCLR on mlp, 64 images of 32 px, batch 32, tfjs's JS cpu backend) trained in the
 * worker and on the page's thread gives the same losses, and while it trains in the worker the
 * page keeps painting: its longest gap between animation frames is well under a step, where
 * on the page's thread a frame waits for each step. The frame rates, the longest gaps and the
 * step times of both are printed (docs/browser.md quotes them).
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { click, openTrainingPage, pageState, waitForStatus, waitForText, pageSuite } from './page-helpers.js';

const STEPS = 6;

/** What one run reports: its losses, where it trained, its steps' seconds, and the animation frames while it trained. */
interface Run {
  losses: number[];
  thread: string;
  stepSeconds: number[];
  seconds: number;
  frames: number;
  longestGapMs: number;
}

describe('the training page trains in a Web Worker (headless Chromium)', function () {
  this.timeout(300_000);
  const suite = pageSuite(4, 32, 32);

  /** Trains {@link STEPS} steps with the worker box ticked or not, counting animation frames meanwhile. */
  async function train(useWorker: boolean): Promise<Run> {
    const { page, errors } = await openTrainingPage(suite.browser);
    const settings = {
      'image-size': '32',
      'batch-size': '32',
      epochs: '10',
      seed: '7',
      'method-args': 'projHiddenDim=64 projOutputDim=32',
      'pause-at': String(STEPS),
    };
    await page.selectOption('#engine', 'cpu');
    for (const [id, value] of Object.entries(settings)) await page.fill(`#${id}`, value);
    await page.selectOption('#method', 'simclr');
    await page.selectOption('#backbone', 'mlp');
    await page.setChecked('#use-worker', useWorker);
    await page.setInputFiles('#folder', join(suite.dir, 'images'));
    await waitForText(page, 'data-status', /^64 images, 32 x 32 px, 2 classes/);
    await page.evaluate(`(() => {
      window.frameTimes = [];
      const loop = (t) => { window.frameTimes.push(t); requestAnimationFrame(loop); };
      requestAnimationFrame(loop);
      window.trainStarted = performance.now();
    })()`);
    await click(page, 'start');
    await waitForStatus(page, new RegExp(`^Paused at step ${STEPS} / `), 240_000);
    const frames = (await page.evaluate(`(() => {
      const end = sslPage.trainEnded;
      const times = window.frameTimes.filter((t) => t >= window.trainStarted && t <= end);
      const gaps = times.slice(1).map((t, i) => t - times[i]);
      const stepSeconds = sslPage.history.map((h) => 32 / h.imagesPerSecond);
      return { seconds: (end - window.trainStarted) / 1000, frames: times.length, longestGapMs: Math.max(...gaps), thread: sslPage.session.thread, stepSeconds };
    })()`)) as Omit<Run, 'losses'>;
    const { losses } = await pageState(page);
    assert.deepEqual(errors, []);
    await page.context().close();
    return { losses, ...frames };
  }

  it(`gives the same losses in the worker as on the page's thread, and the page keeps painting while the worker trains (${STEPS} steps)`, async () => {
    const inWorker = await train(true);
    const onPage = await train(false);
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    for (const [name, run] of Object.entries({ 'in the worker': inWorker, "on the page's thread": onPage })) {
      console.log(
        `      training ${name}: ${STEPS} steps in ${run.seconds.toFixed(1)} s (median step ${median(run.stepSeconds).toFixed(2)} s), ` +
          `${(run.frames / run.seconds).toFixed(1)} frames/s, longest gap between frames ${run.longestGapMs.toFixed(0)} ms`,
      );
    }
    assert.deepEqual([inWorker.thread, onPage.thread], ['worker', 'page']);
    assert.equal(inWorker.losses.length, STEPS);
    assert.ok(inWorker.losses.every(Number.isFinite));
    assert.deepEqual(inWorker.losses, onPage.losses, 'the same run in the worker and on the page');
    const step = median(inWorker.stepSeconds) * 1000;
    assert.ok(
      inWorker.longestGapMs < step / 2,
      `training in the worker, the page went ${inWorker.longestGapMs.toFixed(0)} ms without a frame: not under half a step (${step.toFixed(0)} ms)`,
    );
  });
});

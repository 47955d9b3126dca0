import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { ProgressBar } from '../../src/trainer/callbacks.js';
import type { Progress } from '../../src/trainer/interfaces.js';
import { runCli, tempDir } from '../helpers/run.js';
import { TINY_FLAGS } from './helpers.js';

/** A stream that records what is written; a terminal when `tty`. */
class Recorder extends Writable {
  readonly chunks: string[] = [];
  readonly isTTY: boolean | undefined;
  readonly columns = 120;
  readonly rows = 40;

  constructor(tty: boolean) {
    super();
    this.isTTY = tty ? true : undefined;
  }

  override _write(chunk: Buffer | string, _encoding: BufferEncoding, done: () => void): void {
    this.chunks.push(chunk.toString());
    done();
  }

  get text(): string {
    return this.chunks.join('');
  }
}

/** Drives `bar` through `epochs` epochs of `steps` steps, as the trainer calls it. */
function drive(bar: ProgressBar, epochs: number, steps: number): void {
  const progress: Progress = { epoch: 0, step: 0, batchInEpoch: 0, totalSteps: epochs * steps };
  bar.onFitStart(progress);
  for (let e = 0; e < epochs; e++) {
    progress.epoch = e;
    for (let s = 0; s < steps; s++) {
      progress.step++;
      bar.onTrainBatchEnd(progress, { 'train/loss': 5 - progress.step / 100, 'train/lr': 0.1, 'train/images_per_sec': 1234.5, epoch: e });
    }
    bar.onEpochEnd(progress, { 'val/knn_acc1': 0.25 + e / 10, 'val/acc1': 0.2, epoch: e });
  }
  bar.onFitEnd();
}

// eslint-disable-next-line no-control-regex
const ESCAPE = /\x1b\[/;

describe('progress display', function () {
  this.timeout(120_000);

  it('without a terminal (CI logs, pipes): plain complete lines, no carriage returns or escape codes, not one per step', () => {
    const out = new Recorder(false);
    drive(new ProgressBar(2, 50, out as unknown as NodeJS.WriteStream), 2, 120);
    const text = out.text;
    assert.ok(!text.includes('\r'), 'no carriage return');
    assert.doesNotMatch(text, ESCAPE, 'no escape sequences');
    assert.ok(
      out.chunks.every((c) => c.endsWith('\n')),
      'every write is a whole line',
    );
    const lines = text.trimEnd().split('\n');
    assert.deepEqual(
      lines.filter((l) => l.includes(' step ')).map((l) => /step (\d+)\/240/.exec(l)?.[1]),
      ['1', '50', '100', '150', '200'],
      'a line at the first step and every 50 steps',
    );
    assert.match(lines[0], /^epoch 1\/2 step 1\/240 loss=4\.990 lr=0\.1000 images_per_sec=1\.23e\+3$/);
    const done = lines.filter((l) => l.includes(' done: '));
    assert.deepEqual(done, ['epoch 1/2 done: acc1=0.2000 knn_acc1=0.2500', 'epoch 2/2 done: acc1=0.2000 knn_acc1=0.3500']);
    assert.equal(lines.length, 7);
  });

  it("an epoch that was not validated does not repeat an earlier epoch's metrics", () => {
    const out = new Recorder(false);
    const bar = new ProgressBar(2, 50, out as unknown as NodeJS.WriteStream);
    const progress: Progress = { epoch: 0, step: 10, batchInEpoch: 10, totalSteps: 20 };
    bar.onFitStart(progress);
    bar.onEpochEnd(progress, { 'val/knn_acc1': 0.5, epoch: 0 });
    progress.epoch = 1;
    bar.onEpochEnd(progress, { 'val/knn_acc1': 0.5, epoch: 0 });
    assert.deepEqual(out.text.split('\n'), ['epoch 1/2 done: knn_acc1=0.5000', 'epoch 2/2 done', '']);
  });

  it('on a terminal: a live bar redrawn in place, with the epoch summaries on their own lines', () => {
    const out = new Recorder(true);
    drive(new ProgressBar(2, 50, out as unknown as NodeJS.WriteStream), 2, 120);
    const text = out.text;
    assert.match(text, ESCAPE, 'the bar moves the cursor');
    assert.match(text, /epoch 1\/2 \|[█░]+\| \d+\/240 steps \| loss=/, 'bar with epoch, steps and metrics');
    assert.match(text, /\nepoch 1\/2 done: acc1=0\.2000 knn_acc1=0\.2500\n/);
    assert.ok(text.endsWith('\nepoch 2/2 done: acc1=0.2000 knn_acc1=0.3500\n'), 'the last epoch line ends the output (no stale bar after it)');
    assert.ok(!text.includes('epoch 3/2'), 'no bar for an epoch that does not exist');
  });

  it('ssl-train with stdout piped prints plain progress lines only', () => {
    const runDir = join(tempDir(), 'run');
    const { status, stdout, stderr } = runCli([...TINY_FLAGS, '--run-dir', runDir], 180_000);
    assert.equal(status, 0, stderr);
    assert.ok(!stdout.includes('\r') && !stderr.includes('\r'), 'no carriage return in stdout or stderr');
    assert.doesNotMatch(stdout, ESCAPE);
    const lines = stdout.trimEnd().split('\n');
    assert.match(lines[0], /^epoch 1\/2 step 1\/16 loss=\S+ lr=\S+ images_per_sec=\S+$/);
    assert.equal(lines.filter((l) => / done: /.test(l)).length, 2, 'one line per epoch');
    assert.ok(lines.length <= 6, `a handful of lines, not one per step:\n${stdout}`);
    assert.equal(JSON.parse(lines[lines.length - 1]).runDir, runDir, 'the result as the last line');
  });
});

/**
 * State under gradient accumulation (issue #33, docs/methods.md) for the methods with a queue
 * or a memory bank beyond accumulation-state.test.ts's DINO and MoCo v2+: with
 * `--accumulate-grad-batches 2` on two micro-batches of N,
 * - the queue (or bank) after the step equals the one batch of 2N's: written once, after the
 *   optimizer step, in micro-batch order;
 * - methods whose loss is a mean of per-sample terms given the queue (ReSSL, NNBYOL, NNSiam;
 *   per-sample norms here) also match the batch of 2N in every parameter and the loss;
 * - methods whose loss couples the samples of a micro-batch (SwAV's Sinkhorn-Knopp, NNCLR's
 *   and All4One's contrastive terms) cannot match it in the loss, but each micro-batch must see
 *   the step's starting queue: the step's loss is the mean of the losses each micro-batch gives
 *   alone from the same start;
 * and writing the queue after every micro-batch (the negative control) fails that. DeepCluster
 * v2's bank is written by sample index and read only by the next epoch's k-means, so it matches
 * the batch of 2N whatever the write order: no negative control can fail it there.
 */
import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import type { MethodArgs } from '../../src/methods/base.js';
import { batchOf, buildMethod, flushQueues, N, runStep, worstDifference, type StepResult } from './accumulation.js';

const TOL = 1e-4;
const HEADS = { projHiddenDim: 8, projOutputDim: 4, predHiddenDim: 8 };

interface Case {
  method: string;
  args: MethodArgs;
  views: number;
  /** Whether the loss couples a micro-batch's samples (then compared micro-batch by micro-batch, not with the batch of 2N). */
  coupled: boolean;
}

const CASES: Case[] = [
  { method: 'ressl', args: { projHiddenDim: 8, projOutputDim: 4, queueSize: 16 }, views: 2, coupled: false },
  { method: 'nnbyol', args: { ...HEADS, queueSize: 16 }, views: 2, coupled: false },
  { method: 'nnsiam', args: { ...HEADS, queueSize: 16 }, views: 2, coupled: false },
  { method: 'nnclr', args: { ...HEADS, queueSize: 16 }, views: 2, coupled: true },
  { method: 'all4one', args: { ...HEADS, queueSize: 16, transformerHeads: 2, transformerLayers: 1, neighbours: 3 }, views: 2, coupled: true },
  {
    method: 'swav',
    args: { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 5, queueSize: 16, epochQueueStarts: 0, freezePrototypesEpochs: 0 },
    views: 4,
    coupled: true,
  },
];

/** The names of the state entries of `method`'s queues and memory banks. */
function memoryNames(method: string, args: MethodArgs): string[] {
  const m = buildMethod(method, args);
  const prefixes = m.memoryModules().map(([name]) => `${name}.`);
  const names = Object.keys(m.stateDict()).filter((n) => prefixes.some((p) => n.startsWith(p)));
  m.dispose();
  return names;
}

const relative = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-6);

describe('state under gradient accumulation (every method with a queue or a memory bank): k = 2 micro-batches of N against one batch of 2N', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  for (const { method, args, views, coupled } of CASES) {
    const what = coupled
      ? "the queue equals the batch of 2N's; each micro-batch's loss is the one it gives alone from the step's start"
      : "the queue, every parameter and the loss equal the batch of 2N's";
    it(`${method}: ${what}; writing the queue after each micro-batch fails it`, async () => {
      const halves = [batchOf(views, 0, N), batchOf(views, N, N)];
      const whole = await runStep(buildMethod(method, args), [batchOf(views, 0, 2 * N)]);
      const accumulated = await runStep(buildMethod(method, args), halves);
      const perMicroBatch = await runStep(buildMethod(method, args), halves, { perMicroBatch: flushQueues });
      const memory = memoryNames(method, args);
      assert.ok(memory.length > 0, `${method} has a queue`);
      const queue = worstDifference(accumulated.state, whole.state, memory);
      assert.ok(queue.difference < TOL, `${method}: ${queue.name} differs from the batch of 2N's by ${queue.difference}`);
      let reference: StepResult | { loss: number } = whole;
      if (coupled) {
        const alone = [await runStep(buildMethod(method, args), [halves[0]!]), await runStep(buildMethod(method, args), [halves[1]!])];
        reference = { loss: (alone[0]!.loss + alone[1]!.loss) / 2 };
      } else {
        const all = worstDifference(accumulated.state, whole.state, Object.keys(whole.state));
        assert.ok(all.difference < TOL, `${method}: ${all.name} differs from the batch of 2N's by ${all.difference}`);
      }
      assert.ok(relative(accumulated.loss, reference.loss) < TOL, `${method}: loss ${accumulated.loss} vs ${reference.loss}`);
      assert.ok(relative(perMicroBatch.loss, reference.loss) > TOL, `${method}: negative control: loss ${perMicroBatch.loss} vs ${reference.loss}`);
    });
  }

  it("deepclusterv2: the memory bank (written by sample index after the step) equals the batch of 2N's", async () => {
    const args = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 3, heads: 2 };
    const whole = await runStep(buildMethod('deepclusterv2', args), [batchOf(2, 0, 2 * N)]);
    const accumulated = await runStep(buildMethod('deepclusterv2', args), [batchOf(2, 0, N), batchOf(2, N, N)]);
    const memory = memoryNames('deepclusterv2', args);
    assert.ok(memory.some((n) => n.startsWith('memory.')));
    const got = worstDifference(accumulated.state, whole.state, memory);
    assert.ok(got.difference < TOL, `${got.name} differs by ${got.difference}`);
    const fresh = buildMethod('deepclusterv2', args);
    const before = fresh.stateDict()['memory.bank']!.dataSync().slice() as Float32Array;
    fresh.dispose();
    assert.ok(worstDifference(whole.state, { 'memory.bank': before }, ['memory.bank']).difference > 1e-3, 'the step wrote the bank');
  });
});

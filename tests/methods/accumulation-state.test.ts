/**
 * State under gradient accumulation (issue #33, docs/methods.md): `--accumulate-grad-batches 2`
 * on two micro-batches of N equals one step on the batch of 2N, state included, for DINO (its
 * centre and EMA teacher) and MoCo v2+ (its queues of keys), both free of batch coupling here
 * (the mlp backbone and heads with per-sample norms), so the loss and every parameter match
 * too. Each has a negative control writing the state after every micro-batch, which fails.
 * The other methods with a queue: accumulation-state.full.test.ts. W ranks with accumulation
 * against one process with the same accumulation: the verify rows of tests/distributed/zoo-table.ts.
 */
import { strict as assert } from 'node:assert';
import { initEngine } from '../../src/core/engine.js';
import { batchOf, buildMethod, flushQueues, methodContext, N, runStep, worstDifference } from './accumulation.js';
import { DinoCentrePerMicroBatch } from './dino-centre-per-micro-batch.js';

const DINO = { projHiddenDim: 8, projOutputDim: 4, numPrototypes: 6, freezeLastLayerEpochs: 0 };
const MOCO = { projHiddenDim: 8, projOutputDim: 4, queueSize: 16 };
const TOL = 1e-4;

describe('state under gradient accumulation: k = 2 micro-batches of N equal one batch of 2N', () => {
  before(async () => {
    await initEngine('cpu-js');
  });

  it('dino: the centre (moved once, after the step, by the mean over both micro-batches), the EMA teacher, every parameter and the loss; the centre moved per micro-batch fails it', async () => {
    const whole = await runStep(buildMethod('dino', DINO), [batchOf(4, 0, 2 * N)]);
    const halves = [batchOf(4, 0, N), batchOf(4, N, N)];
    const accumulated = await runStep(buildMethod('dino', DINO), halves);
    const perMicroBatch = await runStep(new DinoCentrePerMicroBatch(methodContext('dino', DINO)), halves);
    assert.ok(Math.max(...Array.from(whole.state.centre!, Math.abs)) > 1e-3, 'the centre moved');
    const names = Object.keys(whole.state);
    assert.ok(names.some((n) => n.startsWith('momentumBackbone.')));
    const got = worstDifference(accumulated.state, whole.state, names);
    assert.ok(got.difference < TOL, `accumulated vs one batch: ${got.name} differs by ${got.difference}`);
    assert.ok(Math.abs(accumulated.loss - whole.loss) < TOL * Math.abs(whole.loss), `loss ${accumulated.loss} vs ${whole.loss}`);
    const centre = worstDifference(perMicroBatch.state, whole.state, ['centre']);
    assert.ok(centre.difference > 0.05, `negative control: the per-micro-batch centre differs by only ${centre.difference}`);
    assert.ok(Math.abs(perMicroBatch.loss - whole.loss) > TOL * Math.abs(whole.loss), 'negative control: the second micro-batch saw a moved centre');
  });

  it("dino: micro-batches of unequal size (a short last batch): the centre is the batch of 2N's, each micro-batch's teacher mean weighted by its rows", async () => {
    const whole = await runStep(buildMethod('dino', DINO), [batchOf(4, 0, 2 * N)]);
    const uneven = await runStep(buildMethod('dino', DINO), [batchOf(4, 0, N + 2), batchOf(4, N + 2, N - 2)]);
    const got = worstDifference(uneven.state, whole.state, ['centre']);
    assert.ok(got.difference < TOL, `the centre differs by ${got.difference}`);
    // The micro-batches' centres averaged without their weights would be another centre.
    const halves = await runStep(buildMethod('dino', DINO), [batchOf(4, 0, N + 2)]);
    const rest = await runStep(buildMethod('dino', DINO), [batchOf(4, N + 2, N - 2)]);
    const unweighted = { centre: halves.state.centre!.map((v, k) => (v + rest.state.centre![k]!) / 2) };
    assert.ok(worstDifference(unweighted, whole.state, ['centre']).difference > 1e-3, 'the weights matter for these batches');
  });

  it("mocov2plus: the queues and their pointer, every parameter and the loss; writing the queue after each micro-batch (micro-batch 2's negatives include micro-batch 1's keys) fails it", async () => {
    const whole = await runStep(buildMethod('mocov2plus', MOCO), [batchOf(2, 0, 2 * N)]);
    const halves = [batchOf(2, 0, N), batchOf(2, N, N)];
    const accumulated = await runStep(buildMethod('mocov2plus', MOCO), halves);
    const perMicroBatch = await runStep(buildMethod('mocov2plus', MOCO), halves, { perMicroBatch: flushQueues });
    const names = Object.keys(whole.state);
    assert.deepEqual(Array.from(whole.state['queue.pointer']!), [2 * N]);
    const got = worstDifference(accumulated.state, whole.state, names);
    assert.ok(got.difference < TOL, `accumulated vs one batch: ${got.name} differs by ${got.difference}`);
    assert.ok(Math.abs(accumulated.loss - whole.loss) < TOL * Math.abs(whole.loss), `loss ${accumulated.loss} vs ${whole.loss}`);
    const wrong = worstDifference(perMicroBatch.state, whole.state, names);
    assert.ok(wrong.difference > 1e-3, `negative control: differs by only ${wrong.difference}`);
    assert.ok(Math.abs(perMicroBatch.loss - whole.loss) > TOL * Math.abs(whole.loss), 'negative control: the loss of micro-batch 2 saw micro-batch 1 keys');
  });
});

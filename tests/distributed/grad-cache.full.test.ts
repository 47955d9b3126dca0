import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { expectAllOk, freshDir, runRanks } from './helpers.js';

const HEADS: Record<string, Record<string, number>> = {
  simclr: { projHiddenDim: 32, projOutputDim: 16 },
  barlow_twins: { projHiddenDim: 32, projOutputDim: 16 },
  byol: { projHiddenDim: 32, projOutputDim: 16, predHiddenDim: 32 },
};

interface Result {
  rank: number;
  counts: Record<string, number>;
  gradientAllReduces: number;
  modelFile?: string;
  /** Rank 0: the last logged training metrics (loss, class_loss, acc1, acc5, embedding_std). */
  trainMetrics?: Record<string, number>;
}

async function train(method: string, worldSize: number, chunk?: number): Promise<Result[]> {
  const dir = freshDir(`grad-cache-${method}-${worldSize}-${chunk ?? 'plain'}`);
  const outcomes = await runRanks(
    'grad-cache',
    { dir, worldSize, rendezvous: `file://${dir}/store`, timeoutMs: 60_000, method, chunk, batchSize: 24, steps: 3, methodArgs: HEADS[method] },
    180_000,
  );
  expectAllOk(outcomes);
  return outcomes.map((o) => o.result as unknown as Result);
}

function model(results: Result[]): Record<string, number[]> {
  return JSON.parse(readFileSync(results[0].modelFile as string, 'utf8')) as Record<string, number[]>;
}

/** Largest per-tensor max|a - b| / max|b|. */
function worst(a: Record<string, number[]>, b: Record<string, number[]>): number {
  let w = 0;
  for (const [name, ref] of Object.entries(b)) {
    let diff = 0;
    let scale = 0;
    ref.forEach((x, i) => {
      diff = Math.max(diff, Math.abs(a[name][i] - x));
      scale = Math.max(scale, Math.abs(x));
    });
    w = Math.max(w, scale === 0 ? diff : diff / scale);
  }
  return w;
}

describe('gradient cache (group-norm backbone and heads)', function () {
  this.timeout(600_000);

  const cases: Array<[string, number, number[]]> = [
    ['simclr', 1, [5, 8]],
    ['barlow_twins', 1, [5, 8]],
    ['byol', 1, [5]],
    ['simclr', 3, [3, 8]],
    ['barlow_twins', 3, [3]],
    ['byol', 3, [3]],
  ];
  for (const [method, worldSize, chunks] of cases) {
    it(`${method}, ${worldSize} rank(s): chunks ${chunks.join(', ')} of the local batch ${24 / worldSize} give the unchunked parameters and metrics after 3 steps, with one gradient all-reduce per step`, async () => {
      const plain = await train(method, worldSize);
      for (const chunk of chunks) {
        const cached = await train(method, worldSize, chunk);
        const difference = worst(model(cached), model(plain));
        assert.ok(difference < 1e-5, `chunk ${chunk}: worst relative difference ${difference}`);
        // The logged metrics of the step are those of the unchunked step, too.
        const expected = plain[0].trainMetrics as Record<string, number>;
        for (const [name, value] of Object.entries(cached[0].trainMetrics as Record<string, number>)) {
          assert.ok(
            Number.isFinite(value) && Math.abs(value - expected[name]) <= 1e-5 * Math.max(1, Math.abs(expected[name])),
            `chunk ${chunk}: ${name} ${value} vs ${expected[name]}`,
          );
        }
        for (const r of cached) {
          assert.equal(r.gradientAllReduces, 3, `rank ${r.rank}: gradient all-reduces over 3 steps`);
          // Apart from the gradient sync, the chunked run issues exactly the collectives
          // of the unchunked one (the loss gathers once per step in both).
          assert.deepEqual(r.counts, plain[r.rank].counts, `rank ${r.rank}: collective calls`);
        }
      }
    });
  }
});

/**
 * The cases of tests/fixtures/losses/deepclusterv2-torch.json (scripts/gen_deepclusterv2_fixtures.py)
 * and how a rank evaluates them (one process: tests/losses/deepclusterv2.test.ts; W ranks:
 * tests/distributed/deepclusterv2.test.ts).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { tf } from '../../src/core/tf.js';
import { deepClusterV2Loss } from '../../src/losses/index.js';
import { FIXTURE_DIR } from './helpers.js';

/** One case of tests/fixtures/losses/deepclusterv2-torch.json. */
export interface DeepClusterCase {
  name: string;
  n: number;
  views: number;
  k: number;
  heads: number;
  temperature: number;
  /** Per head `[V·N, K]` row-major. */
  scores: number[][];
  /** Per head `[N]`. */
  targets: number[][];
  loss: number;
  grads: number[][];
}

/** The cases of the PyTorch reference file. */
export function deepClusterCases(): DeepClusterCase[] {
  return (JSON.parse(readFileSync(join(FIXTURE_DIR, 'deepclusterv2-torch.json'), 'utf8')) as { cases: DeepClusterCase[] }).cases;
}

/** Rank r's rows `[V·B, K]` of a head's global scores `[V·N, K]` (rows r·B..r·B+B−1 of each view block). */
export function rankRows(values: number[], c: DeepClusterCase, rank: number, worldSize: number): number[] {
  const b = c.n / worldSize;
  const out: number[] = [];
  for (let v = 0; v < c.views; v++) out.push(...values.slice((v * c.n + rank * b) * c.k, (v * c.n + rank * b + b) * c.k));
  return out;
}

/** The loss and its gradient with respect to each head's scores, for rank `rank`'s rows (over `group`). */
export function lossAndGrads(c: DeepClusterCase, rank: number, worldSize: number, group?: ProcessGroup): { loss: number; grads: Float32Array[] } {
  const b = c.n / worldSize;
  return tf.tidy(() => {
    const scores = c.scores.map((s) => tf.tensor2d(rankRows(s, c, rank, worldSize), [c.views * b, c.k]));
    const targets = c.targets.map((t) => Int32Array.from(t.slice(rank * b, rank * b + b)));
    const { value, grads } = tf.valueAndGrads((...s: tf.Tensor[]) => deepClusterV2Loss(s as tf.Tensor2D[], targets, { temperature: c.temperature }, group))(
      scores,
    );
    return { loss: value.dataSync()[0]!, grads: grads.map((g) => Float32Array.from(g.dataSync())) };
  });
}

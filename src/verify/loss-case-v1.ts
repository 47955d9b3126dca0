/**
 * Backward reading of the first loss-reference format, `ssl-loss-oracle/1` (one batch of
 * `[N][D]` embeddings z1, z2 (p1, p2), and SimCLR, Barlow Twins, BYOL and VICReg on it): each
 * of its losses becomes one case of the current format (./loss-case-format.ts), its
 * hyper-parameters renamed to the current ones (`bt_eps` → `eps`, `sim_w` → `simWeight`, …)
 * and its `distributed.per_rank_loss` kept as the per-rank losses of its world size.
 */
import type { CaseReader } from './loss-case-reader.js';
import type { CaseTensor, LossCase } from './loss-case-format.js';

/** The format tag of the first version. */
export const LEGACY_LOSS_CASE_FORMAT = 'ssl-loss-oracle/1';

/** Per /1 loss: its inputs, and its hyper-parameters as `[current name, /1 name]`. */
const V1_LOSSES: Record<string, { inputs: string[]; hyper: Array<[string, string]> }> = {
  simclr: { inputs: ['z1', 'z2'], hyper: [['temperature', 'temperature']] },
  barlow: {
    inputs: ['z1', 'z2'],
    hyper: [
      ['lambd', 'lambd'],
      ['scale', 'scale'],
      ['eps', 'bt_eps'],
    ],
  },
  byol: { inputs: ['p1', 'p2', 'z1', 'z2'], hyper: [] },
  vicreg: {
    inputs: ['z1', 'z2'],
    hyper: [
      ['simWeight', 'sim_w'],
      ['varWeight', 'var_w'],
      ['covWeight', 'cov_w'],
      ['gamma', 'gamma'],
      ['eps', 'vic_eps'],
    ],
  },
};

type Json = unknown;

/**
 * The cases of a `ssl-loss-oracle/1` file (`root`, already parsed), validated field by field
 * with the /1 field names in the messages. A loss /1 does not define keeps its name as the
 * loss (`verify` reports it as skipped) and its hyper-parameters as they are.
 */
export function parseLegacyLossCase(root: Record<string, Json>, r: CaseReader): LossCase[] {
  const N = r.positiveInt(root.N, 'N');
  const D = r.positiveInt(root.D, 'D');
  const seed = root.seed === undefined ? undefined : r.number(root.seed, 'seed');
  const hyper: Record<string, number> = {};
  for (const [k, v] of Object.entries(r.object(root.hyper, 'hyper'))) hyper[k] = r.number(v, `hyper.${k}`);
  const conventions: Record<string, string> = {};
  if (root.conventions !== undefined) {
    for (const [k, v] of Object.entries(r.object(root.conventions, 'conventions'))) conventions[k] = r.string(v, `conventions.${k}`);
  }
  const inputsJson = r.object(root.inputs, 'inputs');
  for (const k of ['z1', 'z2']) if (!(k in inputsJson)) r.fail(`inputs.${k}`, 'missing');
  const inputs: Record<string, number[][]> = {};
  for (const [k, v] of Object.entries(inputsJson)) inputs[k] = r.matrix(v, `inputs.${k}`, N, D);

  let worldSize: number | undefined;
  const perRankJson: Record<string, Json> = {};
  if (root.distributed !== undefined) {
    const dj = r.object(root.distributed, 'distributed');
    worldSize = r.positiveInt(dj.world_size, 'distributed.world_size');
    if (N % worldSize !== 0) r.fail('distributed.world_size', `${worldSize} does not divide N = ${N}`);
    if (dj.per_rank_loss !== undefined) Object.assign(perRankJson, r.object(dj.per_rank_loss, 'distributed.per_rank_loss'));
  }

  const lossesJson = r.object(root.losses, 'losses');
  if (Object.keys(lossesJson).length === 0) r.fail('losses', 'no losses in the case');
  const tensor = (m: number[][]): CaseTensor => ({ shape: [N, D], dtype: 'float32', batchAxis: 0, data: m.flat() });
  return Object.entries(lossesJson).map(([name, entryJson]): LossCase => {
    const field = `losses.${name}`;
    const e = r.object(entryJson, field);
    const loss = r.number(e.loss, `${field}.loss`);
    const spec = Object.prototype.hasOwnProperty.call(V1_LOSSES, name) ? V1_LOSSES[name] : undefined;
    for (const k of spec?.inputs ?? []) if (inputs[k] === undefined) r.fail(`inputs.${k}`, `missing (needed by ${field})`);
    const grad: Record<string, number[]> = {};
    for (const [k, g] of Object.entries(r.object(e.grad, `${field}.grad`))) {
      if (inputs[k] === undefined) r.fail(`${field}.grad.${k}`, `no input named ${JSON.stringify(k)} in inputs`);
      grad[k] = r.matrix(g, `${field}.grad.${k}`, N, D).flat();
    }
    let terms: Record<string, number> | undefined;
    if (e.terms !== undefined) {
      terms = {};
      for (const [k, t] of Object.entries(r.object(e.terms, `${field}.terms`))) terms[k] = r.number(t, `${field}.terms.${k}`);
    }
    let caseHyper: Record<string, number> = { ...hyper };
    if (spec) {
      for (const k of spec.inputs) if (grad[k] === undefined) r.fail(`${field}.grad.${k}`, 'missing');
      caseHyper = {};
      for (const [now, then] of spec.hyper) {
        const v = hyper[then];
        if (v === undefined) r.fail(`hyper.${then}`, `missing (needed by ${field})`);
        caseHyper[now] = v;
      }
    }
    const names = spec?.inputs ?? Object.keys(grad);
    const perRank: Record<number, number[]> = {};
    if (worldSize !== undefined && perRankJson[name] !== undefined) {
      perRank[worldSize] = r.numbers(perRankJson[name], `distributed.per_rank_loss.${name}`, worldSize, 'one per rank');
    }
    return {
      source: r.source,
      name,
      loss: name,
      N,
      seed,
      hyper: caseHyper,
      convention: conventions[name],
      inputs: Object.fromEntries(names.map((k) => [k, tensor(inputs[k]!)])),
      state: {},
      expected: { loss, grad, perRank, outputs: {}, stateAfter: {}, ...(terms ? { terms } : {}) },
    };
  });
}

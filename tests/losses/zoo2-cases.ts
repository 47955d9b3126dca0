/**
 * The `ssl-zoo-loss/1` reference files of the zoo's second set of losses
 * (scripts/gen_zoo2_loss_fixtures.py, tests/fixtures/losses/zoo2-*.json): loading, and the call
 * of each loss with the file's hyper-parameters (returning its outputs too: the Sinkhorn
 * assignments, DINO's new centre). Rank inputs, evaluation and the W-rank check are those of
 * ./zoo-cases.ts. Shared by tests/losses/zoo2-fixtures.test.ts (one process) and
 * tests/distributed/zoo2-losses.test.ts (W real processes).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf, type Tensor } from '../../src/core/tf.js';
import type { ProcessGroup } from '../../src/core/process-group.js';
import { all4oneCentroidLoss, all4oneFeatureLoss, dinoLoss, maeLoss, sinkhornKnopp, swavLoss, vibcregLoss, wmseLoss } from '../../src/losses/index.js';
import { FIXTURE_DIR } from './helpers.js';
import { evaluateCase, ZOO_FORMAT, type ZooCaseFile, type ZooLossFn, type ZooRankResult } from './zoo-cases.js';

/** The cases with a reference file `zoo2-<name>.json`. */
export const ZOO2_LOSSES = ['swav', 'swav-queue', 'dino', 'mae', 'wmse', 'vibcreg', 'all4one', 'all4one-centroid'] as const;
export type Zoo2Loss = (typeof ZOO2_LOSSES)[number];

export interface Zoo2Case extends ZooCaseFile {
  loss: Zoo2Loss;
}

export function zoo2FixturePath(loss: string): string {
  return join(FIXTURE_DIR, `zoo2-${loss}.json`);
}

export function loadZoo2Case(path: string): Zoo2Case {
  const c = JSON.parse(readFileSync(path, 'utf8')) as Zoo2Case;
  if (c.format !== ZOO_FORMAT) throw new Error(`${path}: format ${JSON.stringify(c.format)}, expected ${ZOO_FORMAT}`);
  if (!(ZOO2_LOSSES as readonly string[]).includes(c.loss)) throw new Error(`${path}: unknown loss ${c.loss}`);
  return c;
}

function hyper(c: Zoo2Case, key: string): number {
  const v = c.hyper[key];
  if (v === undefined) throw new Error(`${c.loss}: hyper.${key} missing`);
  return v;
}

type T2 = tf.Tensor2D;

/** The inputs named `<prefix>0`, `<prefix>1`, … in order. */
export function numbered(x: Record<string, Tensor>, prefix: string): T2[] {
  const names = Object.keys(x).filter((k) => new RegExp(`^${prefix}\\d+$`).test(k));
  return names.sort((a, b) => Number(a.slice(prefix.length)) - Number(b.slice(prefix.length))).map((k) => x[k] as T2);
}

/** The rows of an int32 `[T, N]` tensor as arrays (W-MSE's permutations). */
export function rowsOfInts(t: Tensor): number[][] {
  return (t as T2).arraySync();
}

/** SwAV's assignments of the two global crops (with their queue scores if the file has them), on `group`. */
export function swavAssignments(c: Zoo2Case, x: Record<string, Tensor>, group: ProcessGroup | undefined): T2[] {
  const options = { epsilon: hyper(c, 'epsilon'), iterations: hyper(c, 'iterations') };
  return numbered(x, 'pred')
    .slice(0, 2)
    .map((p, g) => sinkhornKnopp(p, { ...options, queueScores: x[`queue${g}`] as T2 | undefined }, group));
}

/** The file's loss of the inputs `x` (by name) with its hyper-parameters, on `group`, with its outputs. */
export const callZoo2Loss: ZooLossFn<Zoo2Case> = (c, x, group) => {
  switch (c.loss) {
    case 'swav':
    case 'swav-queue': {
      const assignments = swavAssignments(c, x, group);
      const loss = swavLoss(numbered(x, 'pred'), assignments, { temperature: hyper(c, 'temperature') }, group);
      const outputs: Record<string, Tensor> = { assignments0: assignments[0]!, assignments1: assignments[1]! };
      return { loss, outputs };
    }
    case 'dino': {
      const options = {
        studentTemperature: hyper(c, 'studentTemperature'),
        teacherTemperature: hyper(c, 'teacherTemperature'),
        centreMomentum: hyper(c, 'centreMomentum'),
      };
      const { loss, centre } = dinoLoss(numbered(x, 'student'), numbered(x, 'teacher'), x.centre as tf.Tensor1D, options, group);
      const outputs: Record<string, Tensor> = { centre };
      return { loss, outputs };
    }
    case 'mae':
      return maeLoss(
        x.images as tf.Tensor4D,
        x.predictions as tf.Tensor3D,
        x.mask as T2,
        { patchSize: hyper(c, 'patchSize'), normPixLoss: hyper(c, 'normPixLoss') === 1 },
        group,
      );
    case 'wmse':
      return wmseLoss(
        numbered(x, 'view'),
        { whiteningSize: hyper(c, 'whiteningSize'), eps: hyper(c, 'eps'), permutations: rowsOfInts(x.permutations!) },
        group,
      );
    case 'vibcreg':
      return vibcregLoss(
        x.z1 as T2,
        x.z2 as T2,
        { simWeight: hyper(c, 'simWeight'), varWeight: hyper(c, 'varWeight'), covWeight: hyper(c, 'covWeight') },
        group,
      );
    case 'all4one':
      return all4oneFeatureLoss(x.momentumZ1 as T2, x.momentumZ2 as T2, x.z1 as T2, x.z2 as T2, group);
    case 'all4one-centroid': {
      const options = { temperature: hyper(c, 'temperature') };
      const halves = [
        all4oneCentroidLoss(x.rich1 as T2, x.strange2 as T2, options, group),
        all4oneCentroidLoss(x.rich2 as T2, x.strange1 as T2, options, group),
      ];
      return tf.div(tf.addN(halves), 2) as tf.Scalar;
    }
  }
};

/** Evaluates `fn` (default: the file's loss) on rank `rank`'s inputs: value, input gradients and outputs. */
export function evaluateZoo2Case(
  c: Zoo2Case,
  rank: number,
  worldSize: number,
  group: ProcessGroup | undefined,
  fn: ZooLossFn<Zoo2Case> = callZoo2Loss,
): ZooRankResult {
  return evaluateCase(c, rank, worldSize, group, fn);
}

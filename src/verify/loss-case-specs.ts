/**
 * The losses a case file may name (`cases[i].loss`, docs/loss-case.md) and how each is called:
 * which inputs, state and hyper-parameters it needs, and the call of the src/losses function
 * on one rank's tensors (its slices of the batch inputs, all of the others and of the state).
 */
import type { ProcessGroup } from '../core/process-group.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import {
  all4oneCentroidLoss,
  all4oneFeatureLoss,
  barlowTwinsLoss,
  byolLoss,
  dclLoss,
  deepClusterV2Loss,
  dinoLoss,
  fastSiamLoss,
  ticoLoss,
  mmcrLoss,
  lejepaLoss,
  ijepaLoss,
  maeLoss,
  mocoLoss,
  mocov3Loss,
  negativeCosineLoss,
  nnclrLoss,
  ntXentLoss,
  resslLoss,
  simdinoLoss,
  ibotLoss,
  maskedRows,
  koleoLoss,
  dinov2Loss,
  sinkhornKnopp,
  supconLoss,
  swavLoss,
  vibcregLoss,
  vicregLoss,
  wmseLoss,
  msnLoss,
  vicreglLoss,
} from '../losses/index.js';
import type { LossCase } from './loss-case-format.js';

/** One rank's tensors of a case by name: inputs (sliced) and state. */
export type CaseTensors = Record<string, Tensor>;

/** What a loss call returns: the scalar, or the scalar with outputs and the state after. */
export type CaseLossValue = Scalar | { loss: Scalar; outputs?: Record<string, Tensor>; stateAfter?: Record<string, Tensor> };

/** A loss of a case on one rank (the real one, or, in tests, a deliberately wrong variant). */
export type CaseLossFn = (c: LossCase, x: CaseTensors, group: ProcessGroup | undefined) => CaseLossValue;

/** What a loss needs of a case and how it is called. */
export interface CaseLossSpec {
  /** Input names it needs; `view#` means `view0`, `view1`, … (at least `numbered[prefix]` of them). */
  inputs: readonly string[];
  /** Minimum count of each numbered input (`view#`: 2). */
  numbered?: Readonly<Record<string, number>>;
  /** State entries it needs. */
  state?: readonly string[];
  hyper: readonly string[];
  run: CaseLossFn;
}

type T2 = tf.Tensor2D;

function h(c: LossCase, key: string): number {
  const v = c.hyper[key];
  if (v === undefined) throw new Error(`${c.name}: hyper.${key} missing (validateCaseForLoss should have caught it)`);
  return v;
}

/** The tensors named `<prefix>0`, `<prefix>1`, … in order. */
export function numberedTensors(x: CaseTensors, prefix: string): T2[] {
  const names = Object.keys(x).filter((k) => k.startsWith(prefix) && /^\d+$/.test(k.slice(prefix.length)));
  return names.sort((a, b) => Number(a.slice(prefix.length)) - Number(b.slice(prefix.length))).map((k) => x[k] as T2);
}

/** SwAV's assignments of the two global crops (with their queue scores where the state has them). */
export function swavAssignments(c: LossCase, x: CaseTensors, group: ProcessGroup | undefined): T2[] {
  const options = { epsilon: h(c, 'epsilon'), iterations: h(c, 'iterations') };
  return numberedTensors(x, 'pred')
    .slice(0, 2)
    .map((p, g) => sinkhornKnopp(p, { ...options, queueScores: x[`queue${g}`] as T2 | undefined }, group));
}

const SPECS = {
  simclr: { inputs: ['z1', 'z2'], hyper: ['temperature'], run: (c, x, g) => ntXentLoss(x.z1 as T2, x.z2 as T2, { temperature: h(c, 'temperature') }, g) },
  barlow: {
    inputs: ['z1', 'z2'],
    hyper: ['lambd', 'scale', 'eps'],
    run: (c, x, g) => barlowTwinsLoss(x.z1 as T2, x.z2 as T2, { lambd: h(c, 'lambd'), scale: h(c, 'scale'), eps: h(c, 'eps') }, g),
  },
  byol: { inputs: ['p1', 'p2', 'z1', 'z2'], hyper: [], run: (_c, x, g) => byolLoss(x.p1 as T2, x.p2 as T2, x.z1 as T2, x.z2 as T2, g) },
  vicreg: {
    inputs: ['z1', 'z2'],
    hyper: ['simWeight', 'varWeight', 'covWeight', 'gamma', 'eps'],
    run: (c, x, g) =>
      vicregLoss(
        x.z1 as T2,
        x.z2 as T2,
        { simWeight: h(c, 'simWeight'), varWeight: h(c, 'varWeight'), covWeight: h(c, 'covWeight'), gamma: h(c, 'gamma'), eps: h(c, 'eps') },
        g,
      ),
  },
  moco: {
    inputs: ['query', 'key'],
    state: ['queue'],
    hyper: ['temperature'],
    run: (c, x, g) => mocoLoss(x.query as T2, x.key as T2, x.queue as T2, { temperature: h(c, 'temperature') }, g),
  },
  mocov3: {
    inputs: ['query', 'key'],
    hyper: ['temperature'],
    run: (c, x, g) => mocov3Loss(x.query as T2, x.key as T2, { temperature: h(c, 'temperature') }, g),
  },
  simsiam: { inputs: ['p', 'z'], hyper: [], run: (_c, x, g) => negativeCosineLoss(x.p as T2, x.z as T2, g) },
  nnclr: {
    inputs: ['neighbours', 'predictions'],
    hyper: ['temperature'],
    run: (c, x, g) => nnclrLoss(x.neighbours as T2, x.predictions as T2, { temperature: h(c, 'temperature') }, g),
  },
  supcon: {
    inputs: ['view#', 'labels'],
    numbered: { view: 2 },
    hyper: ['temperature'],
    run: (c, x, g) => supconLoss(numberedTensors(x, 'view'), x.labels as tf.Tensor1D, { temperature: h(c, 'temperature') }, g),
  },
  ressl: {
    inputs: ['q', 'k'],
    state: ['queue'],
    hyper: ['temperatureQ', 'temperatureK'],
    run: (c, x, g) => resslLoss(x.q as T2, x.k as T2, x.queue as T2, { temperatureQ: h(c, 'temperatureQ'), temperatureK: h(c, 'temperatureK') }, g),
  },
  dcl: {
    inputs: ['z1', 'z2'],
    hyper: ['temperature'],
    run: (c, x, g) =>
      dclLoss(x.z1 as T2, x.z2 as T2, { temperature: h(c, 'temperature'), ...(c.hyper.sigma === undefined ? {} : { sigma: c.hyper.sigma }) }, g),
  },
  swav: {
    inputs: ['pred#'],
    numbered: { pred: 2 },
    hyper: ['temperature', 'epsilon', 'iterations'],
    run: (c, x, g) => {
      const assignments = swavAssignments(c, x, g);
      const loss = swavLoss(numberedTensors(x, 'pred'), assignments, { temperature: h(c, 'temperature') }, g);
      return { loss, outputs: Object.fromEntries(assignments.map((a, i) => [`assignments${i}`, a])) };
    },
  },
  dino: {
    inputs: ['student#', 'teacher#'],
    numbered: { student: 2, teacher: 1 },
    state: ['centre'],
    hyper: ['studentTemperature', 'teacherTemperature', 'centreMomentum'],
    run: (c, x, g) => {
      const options = {
        studentTemperature: h(c, 'studentTemperature'),
        teacherTemperature: h(c, 'teacherTemperature'),
        centreMomentum: h(c, 'centreMomentum'),
      };
      const { loss, centre } = dinoLoss(numberedTensors(x, 'student'), numberedTensors(x, 'teacher'), x.centre as tf.Tensor1D, options, g);
      return { loss, stateAfter: { centre } };
    },
  },
  mae: {
    inputs: ['images', 'predictions', 'mask'],
    hyper: ['patchSize', 'normPixLoss'],
    run: (c, x, g) =>
      maeLoss(x.images as tf.Tensor4D, x.predictions as tf.Tensor3D, x.mask as T2, { patchSize: h(c, 'patchSize'), normPixLoss: h(c, 'normPixLoss') === 1 }, g),
  },
  wmse: {
    inputs: ['view#', 'permutations'],
    numbered: { view: 2 },
    hyper: ['whiteningSize', 'eps'],
    run: (c, x, g) =>
      wmseLoss(numberedTensors(x, 'view'), { whiteningSize: h(c, 'whiteningSize'), eps: h(c, 'eps'), permutations: (x.permutations as T2).arraySync() }, g),
  },
  vibcreg: {
    inputs: ['z1', 'z2'],
    hyper: ['simWeight', 'varWeight', 'covWeight'],
    run: (c, x, g) => vibcregLoss(x.z1 as T2, x.z2 as T2, { simWeight: h(c, 'simWeight'), varWeight: h(c, 'varWeight'), covWeight: h(c, 'covWeight') }, g),
  },
  all4one: {
    inputs: ['momentumZ1', 'momentumZ2', 'z1', 'z2'],
    hyper: [],
    run: (_c, x, g) => all4oneFeatureLoss(x.momentumZ1 as T2, x.momentumZ2 as T2, x.z1 as T2, x.z2 as T2, g),
  },
  'all4one-centroid': {
    inputs: ['rich1', 'rich2', 'strange1', 'strange2'],
    hyper: ['temperature'],
    run: (c, x, g) =>
      tf.tidy(() => {
        const options = { temperature: h(c, 'temperature') };
        const halves = [all4oneCentroidLoss(x.rich1 as T2, x.strange2 as T2, options, g), all4oneCentroidLoss(x.rich2 as T2, x.strange1 as T2, options, g)];
        return tf.div(tf.addN(halves), 2) as Scalar;
      }),
  },
  deepclusterv2: {
    inputs: ['scores#', 'targets'],
    numbered: { scores: 1 },
    hyper: ['temperature'],
    run: (c, x, g) =>
      tf.tidy(() => {
        // scores# [V, B, K] (views, this rank's samples, prototypes) -> [V·B, K]; targets [H, B].
        const scores = numberedTensors(x, 'scores').map((s) => tf.reshape(s, [-1, s.shape[s.shape.length - 1]!]) as T2);
        // The loss checks its targets on the device (NaN when out of range); a case file's are host data, checked here.
        (x.targets as T2).arraySync().forEach((row, h) => {
          const k = scores[h]?.shape[1] ?? 0;
          if (row.some((c) => c < -1 || c >= k)) throw new RangeError(`deepClusterV2Loss: head ${h}: targets must be -1 or clusters in 0..${k - 1}`);
        });
        const targets = tf.unstack(tf.cast(x.targets!, 'int32')) as tf.Tensor1D[];
        return deepClusterV2Loss(scores, targets, { temperature: h(c, 'temperature') }, g);
      }),
  },
  fastsiam: {
    inputs: ['prediction#', 'projection#'],
    numbered: { prediction: 2, projection: 2 },
    hyper: [],
    run: (_c, x, g) => fastSiamLoss(numberedTensors(x, 'prediction'), numberedTensors(x, 'projection'), g),
  },
  tico: {
    inputs: ['za', 'zb'],
    state: ['covariance'],
    hyper: ['beta', 'rho'],
    run: (c, x, g) => {
      const { loss, covariance } = ticoLoss(x.za as T2, x.zb as T2, x.covariance as T2, { beta: h(c, 'beta'), rho: h(c, 'rho') }, g);
      return { loss, stateAfter: { covariance } };
    },
  },
  mmcr: {
    inputs: ['view#'],
    numbered: { view: 2 },
    hyper: ['lambda'],
    run: (c, x, g) => mmcrLoss(numberedTensors(x, 'view'), { lambda: h(c, 'lambda') }, g),
  },
  simdino: {
    inputs: ['student#', 'teacher#'],
    numbered: { student: 2, teacher: 1 },
    hyper: ['eps', 'alignWeight'],
    // The logged parts are dropped (disposed by the tidy).
    run: (c, x, g) =>
      tf.tidy(() => simdinoLoss(numberedTensors(x, 'student'), numberedTensors(x, 'teacher'), { eps: h(c, 'eps'), alignWeight: h(c, 'alignWeight') }, g).loss),
  },
  lejepa: {
    inputs: ['view#', 'projections'],
    numbered: { view: 2 },
    hyper: ['sigregWeight', 'globalViews', 'tMax', 'knots'],
    // The logged parts are dropped (disposed by the tidy).
    run: (c, x, g) =>
      tf.tidy(() => {
        const options = { sigregWeight: h(c, 'sigregWeight'), globalViews: h(c, 'globalViews'), tMax: h(c, 'tMax'), knots: h(c, 'knots') };
        return lejepaLoss(numberedTensors(x, 'view'), x.projections as T2, options, g).loss;
      }),
  },
  ijepa: {
    inputs: ['predictions', 'targets'],
    hyper: ['beta', 'mse'],
    run: (c, x, g) => ijepaLoss(x.predictions as T2, x.targets as T2, { distance: h(c, 'mse') === 1 ? 'mse' : 'smooth_l1', beta: h(c, 'beta') }, g),
  },
  msn: {
    inputs: ['anchor#', 'target', 'prototypes'],
    numbered: { anchor: 1 },
    hyper: ['temperature', 'sharpenTemperature', 'sinkhornIterations', 'meMaxWeight'],
    // The logged parts are dropped (disposed by the tidy).
    run: (c, x, g) =>
      tf.tidy(() => {
        const options = {
          temperature: h(c, 'temperature'),
          sharpenTemperature: h(c, 'sharpenTemperature'),
          sinkhornIterations: h(c, 'sinkhornIterations'),
          meMaxWeight: h(c, 'meMaxWeight'),
        };
        return msnLoss(numberedTensors(x, 'anchor'), x.target as T2, x.prototypes as T2, options, g).loss;
      }),
  },
  vicregl: {
    // `location#` ([B, L_v, 2] positions in the source image, one per map): the location-based matching, when given.
    inputs: ['embedding#', 'map#', 'location#'],
    numbered: { embedding: 2, map: 2, location: 0 },
    hyper: ['alpha', 'invWeight', 'varWeight', 'covWeight', 'matchesThere', 'matchesBack', 'l2AllMatches'],
    // The logged parts are dropped (disposed by the tidy).
    run: (c, x, g) =>
      tf.tidy(() => {
        const positions = numberedTensors(x, 'location');
        const options = {
          alpha: h(c, 'alpha'),
          invWeight: h(c, 'invWeight'),
          varWeight: h(c, 'varWeight'),
          covWeight: h(c, 'covWeight'),
          numMatches: [h(c, 'matchesThere'), h(c, 'matchesBack')] as const,
          l2AllMatches: h(c, 'l2AllMatches') === 1,
          locations: positions.length > 0 ? positions.map((p) => Float32Array.from(p.dataSync())) : undefined,
        };
        return vicreglLoss(numberedTensors(x, 'embedding'), numberedTensors(x, 'map') as unknown as tf.Tensor3D[], options, g).loss;
      }),
  },
  ibot: {
    inputs: ['student#', 'teacher#', 'studentPatch#', 'teacherPatch#', 'mask#'],
    numbered: { student: 2, teacher: 1, studentPatch: 1, teacherPatch: 1, mask: 1 },
    state: ['centre', 'patchCentre'],
    hyper: ['studentTemperature', 'teacherTemperature', 'teacherPatchTemperature', 'centreMomentum', 'patchCentreMomentum', 'patchLossWeight'],
    run: (c, x, g) => {
      const options = {
        studentTemperature: h(c, 'studentTemperature'),
        teacherTemperature: h(c, 'teacherTemperature'),
        teacherPatchTemperature: h(c, 'teacherPatchTemperature'),
        centreMomentum: h(c, 'centreMomentum'),
        patchCentreMomentum: h(c, 'patchCentreMomentum'),
        patchLossWeight: h(c, 'patchLossWeight'),
      };
      // The case holds every student patch output [B, L, K]; the loss takes the masked ones (their gather's gradient is
      // the dense one, zero on the other patches, as the reference's).
      const masks = numberedTensors(x, 'mask').map((m) => m.dataSync());
      const teacherPatch = numberedTensors(x, 'teacherPatch') as tf.Tensor[] as tf.Tensor3D[];
      const studentMasked = (numberedTensors(x, 'studentPatch') as tf.Tensor[]).map((s, i) => {
        const [b, l, k] = s.shape;
        return tf.gather(tf.reshape(s, [b! * l!, k!]), tf.tensor1d(maskedRows(masks[i]!, l!).rows, 'int32')) as T2;
      });
      const out = ibotLoss(
        numberedTensors(x, 'student'),
        numberedTensors(x, 'teacher'),
        studentMasked,
        teacherPatch,
        masks,
        x.centre as tf.Tensor1D,
        x.patchCentre as tf.Tensor1D,
        options,
        g,
      );
      tf.dispose([out.cls, out.patch]);
      return { loss: out.loss, stateAfter: { centre: out.centre, patchCentre: out.patchCentre } };
    },
  },
  koleo: { inputs: ['x'], hyper: ['eps'], run: (c, x, g) => koleoLoss(x.x as T2, { eps: h(c, 'eps') }, g) },
  dinov2: {
    inputs: ['student#', 'teacher#', 'studentPatch#', 'teacherPatch#', 'mask#', 'feature#'],
    numbered: { student: 2, teacher: 1, studentPatch: 1, teacherPatch: 1, mask: 1, feature: 1 },
    hyper: ['studentTemperature', 'teacherTemperature', 'sinkhornIterations', 'patchLossWeight', 'koleoWeight'],
    run: (c, x, g) => {
      const options = {
        studentTemperature: h(c, 'studentTemperature'),
        teacherTemperature: h(c, 'teacherTemperature'),
        sinkhornIterations: h(c, 'sinkhornIterations'),
        patchLossWeight: h(c, 'patchLossWeight'),
        koleoWeight: h(c, 'koleoWeight'),
      };
      // The case holds every patch output [B, L, K]; the loss takes the masked ones of the student and of the teacher.
      const masks = numberedTensors(x, 'mask').map((m) => m.dataSync());
      const masked = (prefix: string) =>
        (numberedTensors(x, prefix) as tf.Tensor[]).map((p, i) => {
          const [b, l, k] = p.shape;
          return tf.gather(tf.reshape(p, [b! * l!, k!]), tf.tensor1d(maskedRows(masks[i]!, l!).rows, 'int32')) as T2;
        });
      const teacher = numberedTensors(x, 'teacher');
      const out = dinov2Loss(
        numberedTensors(x, 'student'),
        teacher,
        masked('studentPatch'),
        masked('teacherPatch'),
        masks,
        numberedTensors(x, 'feature'),
        options,
        g,
      );
      tf.dispose([out.cls, out.patch, out.koleo]);
      return out.loss;
    },
  },
} satisfies Record<string, CaseLossSpec>;

/** The losses a case may name (`cases[i].loss`); a case of another loss is reported as skipped. */
export const CASE_LOSS_NAMES = Object.keys(SPECS) as CaseLossName[];
export type CaseLossName = keyof typeof SPECS;

/** The spec of `name`, or undefined when ssl-zoo has no such loss. */
export function caseLossSpec(name: string): CaseLossSpec | undefined {
  return Object.prototype.hasOwnProperty.call(SPECS, name) ? (SPECS as Record<string, CaseLossSpec>)[name] : undefined;
}

/**
 * Why `c` cannot be run by its loss (a missing input, state entry or hyper-parameter, named as
 * its field), or undefined when it can.
 */
export function caseProblem(c: LossCase, spec: CaseLossSpec): string | undefined {
  for (const name of spec.inputs) {
    if (name.endsWith('#')) {
      const prefix = name.slice(0, -1);
      const count = Object.keys(c.inputs).filter((k) => k.startsWith(prefix) && /^\d+$/.test(k.slice(prefix.length))).length;
      const min = spec.numbered?.[prefix] ?? 1;
      if (count < min) return `inputs.${prefix}0: the ${c.loss} loss needs ${prefix}0, ${prefix}1, … (at least ${min}), got ${count}`;
    } else if (!(name in c.inputs)) {
      return `inputs.${name}: missing (needed by the ${c.loss} loss)`;
    }
  }
  for (const name of spec.state ?? []) if (!(name in c.state)) return `state.${name}: missing (needed by the ${c.loss} loss)`;
  for (const name of spec.hyper) if (c.hyper[name] === undefined) return `hyper.${name}: missing (needed by the ${c.loss} loss)`;
  return undefined;
}

/**
 * Parameter groups: which variables an optimizer updates, and with which learning rate,
 * weight decay and momentum. Modelled on PyTorch's `param_groups` and solo-learn's
 * `learnable_params` (a `static_lr` group there is a group with `scheduled: false` here).
 */
import { tf, type Variable } from '../core/tf.js';

/** A trainable parameter with its stable dotted name, e.g. `backbone.layer1.0.conv1.weight`. */
export interface NamedParam {
  /** Dotted name, unique within an optimizer; optimizer checkpoints are keyed by it. */
  name: string;
  /** The live variable the optimizer updates in place (any shape). */
  variable: Variable;
}

/** A set of parameters sharing hyperparameters. */
export interface ParamGroup {
  /** Group name (e.g. `backbone`, `backbone_no_decay`, `classifier`); saved in checkpoints. */
  name: string;
  /** The parameters of the group. */
  params: NamedParam[];
  /** Current learning rate; a scheduler overwrites it before every step. */
  lr: number;
  /** L2 weight decay (SGD, LARS: added to the gradient; AdamW: decoupled). */
  weightDecay: number;
  /** Momentum of this group (SGD, LARS); defaults to the optimizer's `momentum` option. */
  momentum?: number;
  /**
   * LARS only: `true` gives every parameter of the group plain SGD (no layer-wise trust
   * ratio and no weight decay), `false` adapts every parameter; unset follows the
   * optimizer's `excludeBiasAndNorm` option (which excludes 1-D parameters).
   */
  larsExclude?: boolean;
  /**
   * Whether a learning-rate schedule drives this group (default true). `false` keeps the
   * group at its initial lr, like solo-learn's `static_lr` (e.g. the online classifier).
   */
  scheduled?: boolean;
}

/** Every field of a {@link ParamGroup} except its parameters. */
export type GroupSettings = Omit<ParamGroup, 'params'>;

/**
 * Turns `[name, variable]` pairs (as returned by `Module.namedParameters()`) into
 * {@link NamedParam}s, keeping only trainable variables unless `trainableOnly` is false.
 */
export function toNamedParams(entries: ReadonlyArray<readonly [string, Variable]>, trainableOnly = true): NamedParam[] {
  return entries.filter(([, v]) => !trainableOnly || v.trainable).map(([name, variable]) => ({ name, variable }));
}

/**
 * Whether a parameter is a bias or a normalisation weight by solo-learn's rule for weight
 * decay exclusion: rank <= 1 (`param.ndim <= 1`), e.g. a bias [C] or a batch norm gamma [C].
 */
export function isBiasOrNorm(param: NamedParam | Variable): boolean {
  const v = param instanceof tf.Tensor ? param : param.variable;
  return v.rank <= 1;
}

/**
 * Splits one set of parameters into a decayed group (rank >= 2: conv and linear weights)
 * named `settings.name` and a group without weight decay (rank <= 1: biases and
 * normalisation weights) named `${settings.name}_no_decay`, exactly like solo-learn's
 * `remove_bias_and_norm_from_weight_decay`. Empty groups are left out; order is
 * [decayed, no_decay].
 */
export function splitWeightDecay(named: NamedParam[], settings: GroupSettings): ParamGroup[] {
  const decay = named.filter((p) => !isBiasOrNorm(p));
  const noDecay = named.filter((p) => isBiasOrNorm(p));
  const out: ParamGroup[] = [];
  if (decay.length) out.push({ ...settings, params: decay });
  if (noDecay.length) out.push({ ...settings, name: `${settings.name}_no_decay`, weightDecay: 0, params: noDecay });
  return out;
}

/**
 * Applies {@link splitWeightDecay} to every group (solo-learn's `exclude_bias_n_norm_wd`):
 * each group becomes its decayed part followed by its `_no_decay` part.
 */
export function excludeBiasAndNorm(groups: ParamGroup[]): ParamGroup[] {
  return groups.flatMap(({ params, ...settings }) => splitWeightDecay(params, settings));
}

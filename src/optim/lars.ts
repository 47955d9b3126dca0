/** LARS (layer-wise adaptive rate scaling), exactly as solo-learn's `solo/utils/lars.py`. */
import { invalidValue } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';
import type { OptimizerGroup, OptimizerName } from './optimizer.js';
import type { NamedParam, ParamGroup } from './params.js';
import { SGD, type SGDOptions } from './sgd.js';

/** Options of {@link LARS}. */
export interface LARSOptions extends SGDOptions {
  /** Trust coefficient (default 0.02, solo-learn's recipes; the class default there is 1e-3). */
  eta?: number;
  /** Added to the trust-ratio denominator (default 1e-8). */
  eps?: number;
  /** solo-learn's `clip_lr`: trust = min(trust / lr, 1) (default false). */
  clipLr?: boolean;
  /**
   * solo-learn's `exclude_bias_n_norm`: 1-D parameters (biases, norm weights) get plain SGD
   * with momentum, no trust ratio and no weight decay (default false). A group's
   * `larsExclude` overrides this for its parameters.
   */
  excludeBiasAndNorm?: boolean;
}

/**
 * LARS on top of {@link SGD} (momentum, dampening, Nesterov as there). For a parameter p with
 * gradient g in a group with lr and weight decay wd, unless the parameter is excluded:
 *
 * ```
 * if ||p|| > 0 and ||g|| > 0:
 *   trust = eta * ||p|| / (||g|| + wd * ||p|| + eps)
 *   if clipLr: trust = min(trust / lr, 1)
 *   d = (g + wd * p) * trust
 * else:
 *   d = g                        (no weight decay either, as in solo-learn)
 * ```
 * then the SGD momentum update on d. Excluded parameters (see {@link LARSOptions}) use d = g.
 * Norms are Frobenius norms over the whole tensor. State slot: `momentum_buffer`.
 */
export class LARS extends SGD {
  override get type(): OptimizerName {
    return 'lars';
  }

  /** Trust coefficient. */
  readonly eta: number;
  /** Denominator epsilon. */
  readonly eps: number;
  /** Whether the trust ratio is divided by lr and clipped at 1. */
  readonly clipLr: boolean;
  /** Whether 1-D parameters are excluded from adaptation and weight decay. */
  readonly excludeBiasAndNorm: boolean;

  constructor(groups: ParamGroup[], options: LARSOptions = {}) {
    super(groups, options);
    this.eta = options.eta ?? 0.02;
    this.eps = options.eps ?? 1e-8;
    this.clipLr = options.clipLr ?? false;
    this.excludeBiasAndNorm = options.excludeBiasAndNorm ?? false;
    if (!(this.eta > 0) || !Number.isFinite(this.eta)) throw invalidValue('eta', this.eta, 'a finite number > 0');
    if (!(this.eps >= 0) || !Number.isFinite(this.eps)) throw invalidValue('eps', this.eps, 'a finite number >= 0');
  }

  /** Whether `param` of `group` skips the LARS adaptation (and weight decay). */
  isExcluded(param: NamedParam, group: ParamGroup): boolean {
    return group.larsExclude ?? (this.excludeBiasAndNorm && param.variable.rank === 1);
  }

  protected override direction(param: NamedParam, grad: Tensor, group: OptimizerGroup): Tensor {
    if (this.isExcluded(param, group)) return grad;
    const p = param.variable;
    const wd = group.weightDecay;
    const pNorm = euclideanNorm(p);
    const gNorm = euclideanNorm(grad);
    let trust = tf.mul(tf.div(pNorm, tf.add(tf.add(gNorm, tf.mul(pNorm, wd)), this.eps)), this.eta);
    if (this.clipLr) trust = tf.minimum(tf.div(trust, group.lr), 1);
    // Where either norm is 0 the plain gradient is used (scale 1, no decay); the choice is
    // made on scalars so that only two full-size element-wise ops run per parameter.
    const active = tf.logicalAnd(tf.greater(pNorm, 0), tf.greater(gNorm, 0));
    const scale = tf.where(active, trust, tf.onesLike(trust));
    if (wd === 0) return tf.mul(grad, scale);
    const decay = tf.where(active, tf.fill([], wd), tf.zerosLike(trust));
    return tf.mul(tf.add(grad, tf.mul(p, decay)), scale);
  }
}

/** `sqrt(Σ x²)` over every element, a scalar (tf.norm's Pow/Abs kernels are pure JS). */
function euclideanNorm(x: Tensor): Tensor {
  return tf.sqrt(tf.sum(tf.square(x)));
}

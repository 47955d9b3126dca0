/** AdamW (decoupled weight decay), with PyTorch's `torch.optim.AdamW` semantics. */
import { invalidValue } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';
import { Optimizer, type OptimizerGroup, type OptimizerName, type ParamState } from './optimizer.js';
import type { NamedParam, ParamGroup } from './params.js';

/** Options of {@link AdamW}. */
export interface AdamWOptions {
  /** Decay rates of the first and second moment estimates (default [0.9, 0.999]). */
  betas?: [number, number];
  /** Added to the denominator (default 1e-8). */
  eps?: number;
}

const ADAMW_SLOTS = ['exp_avg', 'exp_avg_sq'] as const;

/**
 * AdamW, exactly PyTorch's update (amsgrad off) for parameter p with gradient g at its
 * t-th update (t counted per parameter, from 1):
 *
 * ```
 * p = p * (1 - lr * weightDecay)
 * m = beta1 * m + (1 - beta1) * g          (m, v start at 0)
 * v = beta2 * v + (1 - beta2) * g * g
 * p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * ```
 * State slots: `exp_avg` (m), `exp_avg_sq` (v).
 */
export class AdamW extends Optimizer {
  override get type(): OptimizerName {
    return 'adamw';
  }
  protected override get slotNames(): readonly string[] {
    return ADAMW_SLOTS;
  }

  /** First-moment decay rate. */
  readonly beta1: number;
  /** Second-moment decay rate. */
  readonly beta2: number;
  /** Denominator epsilon. */
  readonly eps: number;

  constructor(groups: ParamGroup[], options: AdamWOptions = {}) {
    super(groups);
    const betas = options.betas ?? [0.9, 0.999];
    if (!Array.isArray(betas) || betas.length !== 2 || betas.some((b) => !(b >= 0 && b < 1))) {
      throw invalidValue('betas', betas, 'two numbers in [0, 1)');
    }
    [this.beta1, this.beta2] = betas;
    this.eps = options.eps ?? 1e-8;
    if (!(this.eps >= 0) || !Number.isFinite(this.eps)) throw invalidValue('eps', this.eps, 'a finite number >= 0');
  }

  protected override updateParam(param: NamedParam, grad: Tensor, group: OptimizerGroup, state: ParamState): void {
    const { beta1, beta2 } = this;
    const t = state.step;
    const p = param.variable;
    const decayed = group.weightDecay !== 0 ? tf.mul(p, 1 - group.lr * group.weightDecay) : p;
    const prevM = state.slots.exp_avg;
    const prevV = state.slots.exp_avg_sq;
    const gm = tf.mul(grad, 1 - beta1);
    const gv = tf.mul(tf.mul(grad, grad), 1 - beta2);
    const m = this.setSlot(state, 'exp_avg', prevM ? tf.add(tf.mul(prevM, beta1), gm) : gm);
    const v = this.setSlot(state, 'exp_avg_sq', prevV ? tf.add(tf.mul(prevV, beta2), gv) : gv);
    const bc1 = 1 - beta1 ** t;
    const bc2Sqrt = Math.sqrt(1 - beta2 ** t);
    const denom = tf.add(tf.div(tf.sqrt(v), bc2Sqrt), this.eps);
    p.assign(tf.sub(decayed, tf.mul(tf.div(m, denom), group.lr / bc1)));
  }
}

/** Stochastic gradient descent with momentum, with PyTorch's `torch.optim.SGD` semantics. */
import { invalidValue } from '../core/errors.js';
import { tf, type Tensor } from '../core/tf.js';
import { checkNonNegative, Optimizer, type OptimizerGroup, type OptimizerName, type ParamState } from './optimizer.js';
import type { NamedParam, ParamGroup } from './params.js';

/** Options of {@link SGD} (and of {@link LARS}, which extends it). */
export interface SGDOptions {
  /** Momentum for groups that set none (default 0.9, the solo-learn recipes' value; PyTorch's is 0). */
  momentum?: number;
  /** Dampening of the momentum (default 0). */
  dampening?: number;
  /** Nesterov momentum (default false); needs momentum > 0 and dampening 0. */
  nesterov?: boolean;
}

const SGD_SLOTS = ['momentum_buffer'] as const;

/**
 * SGD with momentum, exactly PyTorch's update per parameter p with gradient g:
 *
 * ```
 * d = g + weightDecay * p
 * buf = d                                      (first update)
 * buf = momentum * buf + (1 - dampening) * d   (later updates)
 * d = nesterov ? d + momentum * buf : buf      (when momentum != 0)
 * p = p - lr * d
 * ```
 * State slot: `momentum_buffer` (only when momentum != 0).
 */
export class SGD extends Optimizer {
  override get type(): OptimizerName {
    return 'sgd';
  }
  protected override get slotNames(): readonly string[] {
    return SGD_SLOTS;
  }

  /** Default momentum for groups without their own. */
  readonly momentum: number;
  /** Momentum dampening. */
  readonly dampening: number;
  /** Whether momentum is Nesterov's. */
  readonly nesterov: boolean;

  constructor(groups: ParamGroup[], options: SGDOptions = {}) {
    super(groups);
    this.momentum = options.momentum ?? 0.9;
    this.dampening = options.dampening ?? 0;
    this.nesterov = options.nesterov ?? false;
    checkNonNegative('momentum', this.momentum);
    checkNonNegative('dampening', this.dampening);
    if (this.nesterov) {
      for (const g of this.groups) {
        if (this.groupMomentum(g) <= 0 || this.dampening !== 0) {
          throw invalidValue('nesterov', true, `false, unless momentum > 0 and dampening = 0 (group '${g.name}')`);
        }
      }
    }
  }

  /** The momentum used for group `g`. */
  protected groupMomentum(g: OptimizerGroup): number {
    return g.momentum ?? this.momentum;
  }

  /** The update direction before momentum: `g + weightDecay * p` (LARS overrides it). */
  protected direction(param: NamedParam, grad: Tensor, group: OptimizerGroup): Tensor {
    return group.weightDecay !== 0 ? tf.add(grad, tf.mul(param.variable, group.weightDecay)) : grad;
  }

  protected override updateParam(param: NamedParam, grad: Tensor, group: OptimizerGroup, state: ParamState): void {
    let d = this.direction(param, grad, group);
    const momentum = this.groupMomentum(group);
    if (momentum !== 0) {
      const prev = state.slots.momentum_buffer;
      const buf = prev ? tf.add(tf.mul(prev, momentum), tf.mul(d, 1 - this.dampening)) : d;
      this.setSlot(state, 'momentum_buffer', buf);
      d = this.nesterov ? tf.add(d, tf.mul(buf, momentum)) : buf;
    }
    param.variable.assign(tf.sub(param.variable, tf.mul(d, group.lr)));
  }
}

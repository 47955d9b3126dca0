import type { Layer, Module } from '../core/module.js';
import { detach } from '../core/ops.js';
import { tf, type Tensor } from '../core/tf.js';
import type { Backbone } from '../backbones/index.js';
import { defineArgs, type ArgValues } from './args.js';
import { BaseMethod, type MethodContext, type StepInfo } from './base.js';

/**
 * A method with an exponential-moving-average target network (BYOL, MoCo, ...). The
 * target starts as an exact copy of the online network, is never trained, and after
 * every optimizer step moves towards it: `target = tau * target + (1 - tau) * online`,
 * with tau rising from `baseTau` to `finalTau` on a cosine schedule over the run's steps
 * (solo-learn's MomentumUpdater). Its batch-norm statistics come from its own forward
 * passes in training mode, as in solo-learn.
 *
 * The targets initialise themselves: the target backbone is a copy of the online one as
 * soon as it is built (in this constructor), and {@link addMomentumProjector} copies the
 * online projector into its target as it registers the pair, so a subclass has nothing to
 * call. (The target modules are still built with their own initialisation first, so the
 * draws from `ctx.rng` are the same as before the copy.) The online weights are identical on
 * every rank (seeded initialisation, then the strategy's broadcast), so the targets are too.
 */
export abstract class MomentumMethod extends BaseMethod {
  static override readonly args = defineArgs({
    baseTau: { kind: 'float', default: 0.99, ge: 0, le: 1, description: 'EMA coefficient tau of the target network at the first step' },
    finalTau: { kind: 'float', default: 1.0, ge: 0, le: 1, description: 'tau at the last step (cosine schedule from baseTau)' },
  });
  declare readonly args: ArgValues<typeof MomentumMethod.args>;

  readonly momentumBackbone: Backbone;
  /** Current EMA coefficient. */
  tau: number;
  /** The (online projector, EMA target) pair registered by {@link addMomentumProjector}. */
  private projectorPair?: [Module, Layer];

  constructor(ctx: MethodContext) {
    super(ctx);
    this.momentumBackbone = this.addModule('momentumBackbone', ctx.createBackbone(ctx.rng));
    copyInto(this.backbone, this.momentumBackbone);
    this.tau = this.args.baseTau;
  }

  /**
   * Registers `target` as the module `momentumProjector`, the EMA copy of `projector`: its
   * parameters and buffers are overwritten with the projector's now and it is frozen. Call
   * it once `projector` is built (its weights final) and `target` built like it.
   */
  protected addMomentumProjector<L extends Layer>(projector: Module, target: L): L {
    this.projectorPair = [projector, this.addModule('momentumProjector', target)];
    copyInto(projector, target);
    return target;
  }

  /** `[B, C, H, W]`-like view -> `[B, P]`: the target network's projection, detached. */
  protected targetProjection(view: Tensor): Tensor {
    if (!this.projectorPair) throw new Error(`${this.constructor.name}: no momentum projector registered`);
    return detach(this.projectorPair[1].forward(this.momentumBackbone.forward(view)));
  }

  /** Pairs (online, target) whose parameters the EMA links: the backbones, and the projectors when there is a target projector. */
  protected momentumPairs(): Array<[Module, Module]> {
    return this.projectorPair ? [[this.backbone, this.momentumBackbone], this.projectorPair] : [[this.backbone, this.momentumBackbone]];
  }

  /**
   * Copies every online parameter and buffer into its target again, for code that replaces
   * the online weights after construction (loading a pretrained backbone). Construction
   * needs no call: the targets initialise themselves.
   */
  resetTargets(): void {
    for (const [online, target] of this.momentumPairs()) copyInto(online, target);
  }

  /**
   * EMA update after optimizer step `info.step` (1-based) with the tau of the step before
   * it, as solo-learn does; tau is a function of the step alone, so a resumed run
   * continues the same schedule.
   */
  override onTrainBatchEnd(info: StepInfo): void {
    super.onTrainBatchEnd(info);
    const tau = cosineTau(this.args.baseTau, this.args.finalTau, info.step - 1, info.totalSteps);
    tf.tidy(() => {
      for (const [online, target] of this.momentumPairs()) {
        const onlineParams = online.parameters();
        target.parameters().forEach((t, i) => {
          t.assign(tf.add(tf.mul(t, tau), tf.mul(onlineParams[i], 1 - tau)));
        });
      }
    });
    this.tau = cosineTau(this.args.baseTau, this.args.finalTau, info.step, info.totalSteps);
  }

  override stepLogs(): Record<string, number> {
    return { tau: this.tau };
  }
}

/** Overwrites `target`'s parameters and buffers with `online`'s and freezes `target`. */
function copyInto(online: Module, target: Module): void {
  target.loadStateDict(online.stateDict());
  target.freeze();
}

/** solo-learn's tau schedule: `final - (final - base) * (cos(pi * step / maxSteps) + 1) / 2`. */
export function cosineTau(base: number, final: number, step: number, maxSteps: number): number {
  if (maxSteps <= 0) return final;
  return final - ((final - base) * (Math.cos((Math.PI * Math.min(step, maxSteps)) / maxSteps) + 1)) / 2;
}

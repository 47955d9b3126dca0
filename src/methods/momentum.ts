import type { Module } from '../core/module.js';
import { tf } from '../core/tf.js';
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
 * Since the target is built from the online weights after the strategy broadcasts them,
 * it is identical on every rank.
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

  constructor(ctx: MethodContext) {
    super(ctx);
    this.momentumBackbone = this.addModule('momentumBackbone', ctx.createBackbone(ctx.rng));
    this.tau = this.args.baseTau;
  }

  /**
   * Pairs (online, target) whose parameters the EMA links. Subclasses with target heads
   * extend the list (`[...super.momentumPairs(), [this.projector, this.momentumProjector]]`).
   */
  protected momentumPairs(): Array<[Module, Module]> {
    return [[this.backbone, this.momentumBackbone]];
  }

  /** Copies every online parameter and buffer into its target and freezes the targets. */
  initializeTargets(): void {
    for (const [online, target] of this.momentumPairs()) {
      target.loadStateDict(online.stateDict());
      target.freeze();
    }
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

/** solo-learn's tau schedule: `final - (final - base) * (cos(pi * step / maxSteps) + 1) / 2`. */
export function cosineTau(base: number, final: number, step: number, maxSteps: number): number {
  if (maxSteps <= 0) return final;
  return final - ((final - base) * (Math.cos((Math.PI * Math.min(step, maxSteps)) / maxSteps) + 1)) / 2;
}

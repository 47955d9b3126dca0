import { tf, type Tensor, type Variable } from '../core/tf.js';

/**
 * A state update collected over the micro-batches of one optimizer step and applied once,
 * after the optimizer step (the rule of gradient accumulation, docs/methods.md: state advances
 * once per optimizer step, from all its micro-batches, as with one batch of kN).
 *
 * Each micro-batch's loss {@link add}s the value its batch alone would set (e.g. DINO's centre
 * moved by that batch's global-batch teacher mean) with its weight (its global batch size);
 * the method's `onTrainBatchEnd` {@link take}s the weighted mean. When the update is affine in
 * a batch mean (`m · c + (1 − m) · mean`, from the same `c` for every micro-batch), that mean
 * is the update of the concatenated batch. Everything stays on the device: no read.
 */
export class StepMean {
  private values: Array<{ value: Tensor; weight: number }> = [];

  /** Whether values were added since the last {@link take} (or {@link clear}). */
  get pending(): boolean {
    return this.values.length > 0;
  }

  /** Adds one micro-batch's value (a copy is kept: the caller still owns `value`) with weight `weight` > 0. */
  add(value: Tensor, weight: number): void {
    if (!(weight > 0)) throw new Error(`StepMean.add: weight must be > 0, got ${weight}`);
    this.values.push({ value: tf.keep(tf.clone(value)), weight });
  }

  /**
   * The weighted mean `Σ w_j v_j / Σ w_j` of the values added (a new tensor, the caller's; the
   * value itself, bit for bit, when one was added), or undefined if none; then starts afresh.
   */
  take(): Tensor | undefined {
    const { values } = this;
    if (values.length === 0) return undefined;
    this.values = [];
    if (values.length === 1) return values[0]!.value;
    const total = values.reduce((s, v) => s + v.weight, 0);
    const mean = tf.tidy(() => tf.div(tf.addN(values.map(({ value, weight }) => tf.mul(value, weight))), total));
    tf.dispose(values.map((v) => v.value));
    return mean;
  }

  /** Assigns the {@link take}n mean to `target` (the state it updates); nothing if no value was added. */
  applyTo(target: Variable): void {
    const mean = this.take();
    if (mean === undefined) return;
    target.assign(mean);
    mean.dispose();
  }

  /** Drops the values added (a step that was never finished). */
  clear(): void {
    tf.dispose(this.values.map((v) => v.value));
    this.values = [];
  }
}

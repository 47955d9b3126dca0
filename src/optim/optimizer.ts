/**
 * The optimizer base class: parameter groups, gradient lookup, per-parameter state in
 * `tf.Variable`s, and checkpoints keyed by parameter name.
 */
import { invalidValue, UserError } from '../core/errors.js';
import { tf, type Tensor, type Variable } from '../core/tf.js';
import type { NamedParam, ParamGroup } from './params.js';

/** Optimizer names accepted by {@link createOptimizer} and stored in checkpoints. */
export const OPTIMIZER_NAMES = ['sgd', 'lars', 'adamw'] as const;
/** One of {@link OPTIMIZER_NAMES}. */
export type OptimizerName = (typeof OPTIMIZER_NAMES)[number];

/**
 * Gradients for one step, in either form:
 * - a record keyed by `variable.name` (the tfjs-internal variable name, not the dotted
 *   parameter name): exactly the `grads` of `tf.variableGrads(f, varList)`;
 * - a `Map` keyed by the variable itself.
 *
 * Each gradient has its parameter's shape. Parameters without an entry are skipped this
 * step (no update, no weight decay, state untouched); entries for variables the optimizer
 * does not own are ignored. The optimizer never disposes the gradients: the caller does.
 */
export type GradientMap = tf.NamedTensorMap | Map<Variable, Tensor>;

/** A parameter group as held by an optimizer: the given group plus its initial lr. */
export interface OptimizerGroup extends ParamGroup {
  /** The lr the group was constructed with: the base lr of schedules (PyTorch's `initial_lr`). */
  readonly initialLr: number;
}

/** Per-parameter optimizer state. */
export interface ParamState {
  /** Number of updates this parameter has received (steps where it had a gradient). */
  step: number;
  /** State tensors by slot name (e.g. `momentum_buffer`, `exp_avg`), same shape as the parameter. */
  slots: Record<string, Variable>;
}

/** JSON part of an optimizer checkpoint; see {@link Optimizer.stateDict}. */
export interface OptimizerStateMeta {
  /** Format version (1). */
  version: number;
  /** Which optimizer wrote the state. */
  type: OptimizerName;
  /** Number of `step()` calls. */
  iterations: number;
  /** Groups in order, with their current lr and their parameters' dotted names. */
  groups: Array<{ name: string; lr: number; params: string[] }>;
  /** Per parameter (dotted name) that has state: its update count and slot names. */
  params: Record<string, { step: number; slots: string[] }>;
}

/** An optimizer checkpoint: state tensors keyed `${paramName}.${slot}` plus JSON metadata. */
export interface OptimizerState {
  /** E.g. `backbone.conv1.weight.momentum_buffer` -> tensor of the parameter's shape. */
  tensors: Record<string, Tensor>;
  /** Everything else, JSON-serialisable. */
  meta: OptimizerStateMeta;
}

/** Throws a {@link UserError} unless `value` is a finite number >= 0. */
export function checkNonNegative(field: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw invalidValue(field, value, 'a finite number >= 0');
  }
}

/**
 * Base class of SGD, LARS and AdamW.
 *
 * - Built from {@link ParamGroup}s; `groups[i].lr` (or {@link setLr}) may change between
 *   steps (schedules do that before every step).
 * - {@link step} applies one update inside `tf.tidy`; state lives in non-trainable
 *   `tf.Variable`s created on a parameter's first update (so it allocates no tensors after
 *   the first step).
 * - {@link stateDict} / {@link loadStateDict} save and restore the state keyed by dotted
 *   parameter name, so a checkpoint survives a restart (new variables, new tfjs names).
 */
export abstract class Optimizer {
  /** The optimizer's name, as in checkpoints. */
  abstract get type(): OptimizerName;
  /** Names of the state slots this optimizer keeps per parameter. */
  protected abstract get slotNames(): readonly string[];

  /** Parameter groups in order; `lr` is writable. */
  readonly groups: OptimizerGroup[];
  /** Number of completed `step()` calls. */
  iterations = 0;

  private readonly state = new Map<string, ParamState>();

  constructor(groups: ParamGroup[]) {
    if (!Array.isArray(groups) || groups.length === 0) {
      throw new UserError('optimizer: no parameter groups given; expected at least one group with parameters');
    }
    const names = new Set<string>();
    const variables = new Set<Variable>();
    this.groups = groups.map((g, i) => {
      const where = `parameter group ${i} ('${g.name}')`;
      checkNonNegative(`lr of ${where}`, g.lr);
      checkNonNegative(`weightDecay of ${where}`, g.weightDecay);
      if (g.momentum !== undefined) checkNonNegative(`momentum of ${where}`, g.momentum);
      for (const p of g.params) {
        if (names.has(p.name)) throw new Error(`parameter name '${p.name}' appears twice in the optimizer's groups`);
        if (variables.has(p.variable)) throw new Error(`parameter '${p.name}' is given twice (same variable under another name)`);
        names.add(p.name);
        variables.add(p.variable);
      }
      return { ...g, params: [...g.params], initialLr: g.lr };
    });
  }

  /** Sets the learning rate of group `groupIndex`. */
  setLr(groupIndex: number, lr: number): void {
    checkNonNegative(`lr of parameter group ${groupIndex}`, lr);
    this.group(groupIndex).lr = lr;
  }

  /** The current learning rate of group `groupIndex`. */
  getLr(groupIndex: number): number {
    return this.group(groupIndex).lr;
  }

  private group(index: number): OptimizerGroup {
    const g = this.groups[index];
    if (!g) throw new RangeError(`no parameter group ${index} (the optimizer has ${this.groups.length})`);
    return g;
  }

  /** Every parameter of every group, in group order. */
  params(): NamedParam[] {
    return this.groups.flatMap((g) => g.params);
  }

  /**
   * Applies one update to every parameter that has a gradient in `grads` (see
   * {@link GradientMap}). Runs inside `tf.tidy`; the gradients stay owned by the caller.
   */
  step(grads: GradientMap): void {
    const lookup = grads instanceof Map ? (v: Variable) => grads.get(v) : (v: Variable) => (grads as tf.NamedTensorMap)[v.name];
    const work: Array<{ param: NamedParam; grad: Tensor; group: OptimizerGroup }> = [];
    for (const group of this.groups) {
      for (const param of group.params) {
        const grad = lookup(param.variable);
        if (!grad) continue;
        if (!tf.util.arraysEqual(grad.shape, param.variable.shape)) {
          throw new Error(`gradient for '${param.name}' has shape [${grad.shape}] but the parameter has shape [${param.variable.shape}]`);
        }
        work.push({ param, grad, group });
      }
    }
    tf.tidy(() => {
      for (const { param, grad, group } of work) {
        let state = this.state.get(param.name);
        if (!state) {
          state = { step: 0, slots: {} };
          this.state.set(param.name, state);
        }
        state.step += 1;
        this.updateParam(param, grad, group, state);
      }
    });
    this.iterations += 1;
  }

  /**
   * Updates one parameter (called inside `tf.tidy`, with `state.step` already counting this
   * update). Implementations assign the new value to `param.variable` and keep state with
   * {@link setSlot}.
   */
  protected abstract updateParam(param: NamedParam, grad: Tensor, group: OptimizerGroup, state: ParamState): void;

  /** Stores `value` in slot `name` of `state`, creating its variable on first use. */
  protected setSlot(state: ParamState, name: string, value: Tensor): Variable {
    const existing = state.slots[name];
    if (existing) {
      existing.assign(value);
      return existing;
    }
    const v = tf.variable(value, false);
    state.slots[name] = v;
    return v;
  }

  /**
   * The optimizer state: tensors keyed `${paramName}.${slot}` (the live state variables:
   * read or copy them, do not dispose them) and JSON metadata (type, iterations, group lrs
   * and parameter names, per-parameter step counts).
   */
  stateDict(): OptimizerState {
    const tensors: Record<string, Tensor> = {};
    const params: OptimizerStateMeta['params'] = {};
    for (const p of this.params()) {
      const s = this.state.get(p.name);
      if (!s) continue;
      const slots = Object.keys(s.slots);
      params[p.name] = { step: s.step, slots };
      for (const slot of slots) tensors[`${p.name}.${slot}`] = s.slots[slot]!;
    }
    return {
      tensors,
      meta: {
        version: 1,
        type: this.type,
        iterations: this.iterations,
        groups: this.groups.map((g) => ({ name: g.name, lr: g.lr, params: g.params.map((p) => p.name) })),
        params,
      },
    };
  }

  /**
   * Restores a state saved by {@link stateDict} (possibly in another process). The
   * optimizer type, the groups (names and parameter names, in order), the slots and their
   * shapes must match; otherwise a {@link UserError} says what differs and nothing is
   * changed. Restores each group's lr, the step counts and copies of the state tensors.
   */
  loadStateDict(state: OptimizerState): void {
    const { meta, tensors } = state;
    const fail = (why: string) => new UserError(`optimizer state does not match the optimizer: ${why}`);
    if (!meta || typeof meta !== 'object') throw fail('missing meta');
    if (meta.version !== 1) throw fail(`unsupported state version ${JSON.stringify(meta.version)} (expected 1)`);
    if (meta.type !== this.type) throw fail(`it was saved by '${meta.type}' but this optimizer is '${this.type}'`);
    if (!Array.isArray(meta.groups) || meta.groups.length !== this.groups.length) {
      throw fail(`it has ${meta.groups?.length} parameter groups, this optimizer has ${this.groups.length}`);
    }
    this.groups.forEach((g, i) => {
      const saved = meta.groups[i]!;
      if (saved.name !== g.name) throw fail(`group ${i} is named '${saved.name}' in the state, '${g.name}' here`);
      const own = g.params.map((p) => p.name);
      const missing = own.filter((n) => !saved.params.includes(n));
      const unexpected = saved.params.filter((n) => !own.includes(n));
      if (missing.length || unexpected.length || own.some((n, j) => saved.params[j] !== n)) {
        throw fail(
          `group '${g.name}' parameters differ: missing [${missing.join(', ')}], unexpected [${unexpected.join(', ')}]` +
            (missing.length || unexpected.length ? '' : ' (same names, different order)'),
        );
      }
      checkNonNegative(`lr of group '${g.name}' in the optimizer state`, saved.lr);
    });
    const byName = new Map(this.params().map((p) => [p.name, p]));
    const used = new Set<string>();
    for (const [name, info] of Object.entries(meta.params ?? {})) {
      const p = byName.get(name);
      if (!p) throw fail(`state for unknown parameter '${name}'`);
      if (!Number.isInteger(info.step) || info.step < 0) throw fail(`bad step count ${info.step} for '${name}'`);
      for (const slot of info.slots) {
        if (!this.slotNames.includes(slot)) {
          throw fail(`slot '${slot}' of '${name}' is not one of ${this.type}'s slots [${this.slotNames.join(', ')}]`);
        }
        const key = `${name}.${slot}`;
        const t = tensors[key];
        if (!t) throw fail(`tensor '${key}' is missing`);
        if (!tf.util.arraysEqual(t.shape, p.variable.shape)) {
          throw fail(`tensor '${key}' has shape [${t.shape}] but the parameter has shape [${p.variable.shape}]`);
        }
        used.add(key);
      }
    }
    const extra = Object.keys(tensors).filter((k) => !used.has(k));
    if (extra.length) throw fail(`unexpected tensors [${extra.join(', ')}]`);

    this.disposeState();
    this.groups.forEach((g, i) => (g.lr = meta.groups[i]!.lr));
    this.iterations = meta.iterations ?? 0;
    for (const [name, info] of Object.entries(meta.params ?? {})) {
      const slots: Record<string, Variable> = {};
      for (const slot of info.slots) {
        const t = tensors[`${name}.${slot}`]!;
        slots[slot] = tf.tidy(() => tf.variable(t.dtype === 'float32' ? tf.clone(t) : tf.cast(t, 'float32'), false));
      }
      this.state.set(name, { step: info.step, slots });
    }
  }

  /** The state of one parameter by dotted name (undefined before its first update). */
  paramState(name: string): Readonly<ParamState> | undefined {
    return this.state.get(name);
  }

  private disposeState(): void {
    for (const s of this.state.values()) for (const v of Object.values(s.slots)) v.dispose();
    this.state.clear();
  }

  /** Frees the optimizer state (not the parameters). */
  dispose(): void {
    this.disposeState();
  }
}

import { UserError } from './errors.js';
import { tf, type Tensor, type Variable } from './tf.js';

/** Tensors by dotted name, e.g. `backbone.layer1.0.conv1.weight`. */
export type StateDict = Record<string, Tensor>;

/**
 * A tree of named parameters, buffers and submodules, in the spirit of `torch.nn.Module`.
 *
 * - Parameters are trainable `tf.Variable`s; buffers are non-trainable ones (e.g. batch
 *   norm running statistics) that are saved with the state but get no gradient.
 * - `train()` / `eval()` set the mode of the whole tree.
 * - `stateDict()` / `loadStateDict()` save and restore parameters and buffers by dotted
 *   name, with shape checks.
 */
export abstract class Module {
  /** Training mode (true) or evaluation mode (false); see {@link train}. */
  training = true;
  private readonly ownParameters = new Map<string, Variable>();
  private readonly ownBuffers = new Map<string, Variable>();
  private readonly children = new Map<string, Module>();

  /** Registers a trainable parameter; the module owns `initial` from now on. */
  protected addParameter(name: string, initial: Tensor): Variable {
    this.assertFreeName(name);
    const v = tf.variable(initial, true);
    initial.dispose();
    this.ownParameters.set(name, v);
    return v;
  }

  /** Registers a buffer (saved in the state, never trained); owns `initial` from now on. */
  protected addBuffer(name: string, initial: Tensor): Variable {
    this.assertFreeName(name);
    const v = tf.variable(initial, false);
    initial.dispose();
    this.ownBuffers.set(name, v);
    return v;
  }

  /** Registers a submodule under `name` and returns it. */
  protected addModule<M extends Module>(name: string, module: M): M {
    this.assertFreeName(name);
    this.children.set(name, module);
    return module;
  }

  /**
   * Replaces the submodule registered as `name` (used to convert layers, e.g. batch norm
   * to synchronised batch norm). The caller disposes the old one if it is not reused.
   */
  replaceModule(name: string, module: Module): void {
    if (!this.children.has(name)) throw new Error(`no submodule named '${name}'`);
    this.children.set(name, module);
  }

  private assertFreeName(name: string): void {
    if (!/^[A-Za-z0-9_]+$/.test(name)) throw new Error(`invalid member name '${name}'`);
    if (this.ownParameters.has(name) || this.ownBuffers.has(name) || this.children.has(name)) {
      throw new Error(`member '${name}' is already registered`);
    }
  }

  /** Direct submodules by name. */
  namedChildren(): Array<[string, Module]> {
    return [...this.children];
  }

  /** This module and every descendant, depth first, with dotted names ('' for this one). */
  namedModules(prefix = ''): Array<[string, Module]> {
    const out: Array<[string, Module]> = [[prefix, this]];
    for (const [name, child] of this.children) {
      out.push(...child.namedModules(prefix ? `${prefix}.${name}` : name));
    }
    return out;
  }

  /** Every parameter of the tree with its dotted name, in registration order. */
  namedParameters(prefix = ''): Array<[string, Variable]> {
    return this.collect(prefix, (m) => m.ownParameters);
  }

  /** Every buffer of the tree with its dotted name. */
  namedBuffers(prefix = ''): Array<[string, Variable]> {
    return this.collect(prefix, (m) => m.ownBuffers);
  }

  private collect(prefix: string, pick: (m: Module) => Map<string, Variable>): Array<[string, Variable]> {
    const out: Array<[string, Variable]> = [];
    for (const [modName, mod] of this.namedModules(prefix)) {
      for (const [name, v] of pick(mod)) out.push([modName ? `${modName}.${name}` : name, v]);
    }
    return out;
  }

  /** Every parameter of the tree. */
  parameters(): Variable[] {
    return this.namedParameters().map(([, v]) => v);
  }

  /** Trainable parameters: those not frozen with {@link freeze}. */
  trainableParameters(): Variable[] {
    return this.parameters().filter((v) => v.trainable);
  }

  /** Number of scalar parameters (trainable only, or all). */
  numParameters(trainableOnly = false): number {
    return (trainableOnly ? this.trainableParameters() : this.parameters()).reduce((n, v) => n + v.size, 0);
  }

  /** Marks every parameter as not trainable (e.g. an EMA target network). */
  freeze(): this {
    for (const v of this.parameters()) v.trainable = false;
    return this;
  }

  /** Sets training mode on the whole tree. */
  train(mode = true): this {
    for (const [, m] of this.namedModules()) m.training = mode;
    return this;
  }

  /** Sets evaluation mode on the whole tree. */
  eval(): this {
    return this.train(false);
  }

  /** Parameters and buffers by dotted name (the live variables: do not dispose them). */
  stateDict(): StateDict {
    return Object.fromEntries([...this.namedParameters(), ...this.namedBuffers()]);
  }

  /**
   * Copies `state` into the parameters and buffers. Every entry's shape must match; with
   * `strict` (default) the names must match exactly, otherwise missing and extra names
   * are ignored. Returns the names that were missing and unexpected.
   */
  loadStateDict(state: StateDict, strict = true): { missing: string[]; unexpected: string[] } {
    const own = this.stateDict();
    const missing = Object.keys(own).filter((k) => !(k in state));
    const unexpected = Object.keys(state).filter((k) => !(k in own));
    if (strict && (missing.length || unexpected.length)) {
      throw new UserError(`state dict does not match the model: missing [${missing.join(', ')}], unexpected [${unexpected.join(', ')}]`);
    }
    for (const [name, target] of Object.entries(own)) {
      const source = state[name];
      if (!source) continue;
      if (!tf.util.arraysEqual(source.shape, target.shape)) {
        throw new UserError(`state dict entry '${name}' has shape [${source.shape}] but the model expects [${target.shape}]`);
      }
    }
    for (const [name, target] of Object.entries(own)) {
      const source = state[name];
      if (source) (target as Variable).assign(source.dtype === target.dtype ? source : tf.cast(source, target.dtype));
    }
    return { missing, unexpected };
  }

  /** Frees every variable of the tree. */
  dispose(): void {
    for (const [, v] of [...this.namedParameters(), ...this.namedBuffers()]) v.dispose();
  }
}

/** A module with a single-tensor forward pass. */
export abstract class Layer extends Module {
  /** Applies the layer. Shapes are documented by each subclass. */
  abstract forward(x: Tensor): Tensor;
}

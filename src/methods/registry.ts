import { invalidValue } from '../core/errors.js';
import type { CropPolicy } from '../data/augment/crops.js';
import type { ViewRecipe } from '../data/augment/recipes.js';
import { formatArgs, resolveArgs, type ArgSpecs } from './args.js';
import type { BaseMethod, MethodArgs, MethodContext, OptimDefaults } from './base.js';
import { All4One } from './all4one.js';
import { BarlowTwins } from './barlow-twins.js';
import { BYOL } from './byol.js';
import { MAE } from './mae.js';
import { MoCoV2Plus } from './mocov2plus.js';
import { MoCoV3 } from './mocov3.js';
import { ReSSL } from './ressl.js';
import { DCL } from './dcl.js';
import { DeepClusterV2 } from './deepclusterv2.js';
import { DINO } from './dino.js';
import { NNBYOL } from './nnbyol.js';
import { NNCLR } from './nnclr.js';
import { NNSiam } from './nnsiam.js';
import { SimCLR } from './simclr.js';
import { SimSiam } from './simsiam.js';
import { SupCon } from './supcon.js';
import { SwAV } from './swav.js';
import { VICReg } from './vicreg.js';
import { VIbCReg } from './vibcreg.js';
import { WMSE } from './wmse.js';
import { FastSiam } from './fastsiam.js';
import { TiCo } from './tico.js';
import { MMCR } from './mmcr.js';
import { SimDINO } from './simdino.js';
import { LeJEPA } from './lejepa.js';
import { IJEPA } from './ijepa.js';
import { MSN } from './msn.js';
import { VICRegL } from './vicregl.js';
import { IBOT } from './ibot.js';
import { DINOv2 } from './dinov2.js';

/** A method class: constructible from a context, with its declarations and defaults as statics. */
export interface MethodClass {
  new (ctx: MethodContext): BaseMethod;
  /** Its hyperparameters, declared with `defineArgs`. */
  readonly args: ArgSpecs;
  readonly optimDefaults: OptimDefaults;
  readonly viewRecipe: ViewRecipe;
  readonly paper: string;
  readonly needsLabels: boolean;
  readonly crops: CropPolicy;
  readonly defaultBackbone: string;
}

const registry = new Map<string, MethodClass>();

/**
 * Makes a method available to `--method name` (built-ins and user subclasses alike).
 * Registering a name twice replaces the earlier class.
 */
export function registerMethod(name: string, cls: MethodClass): void {
  if (!/^[a-z][a-z0-9_-]*$/.test(name)) throw new Error(`method name '${name}' must be lower-case letters, digits, - or _`);
  if (Object.prototype.hasOwnProperty.call(cls, 'defaultArgs')) {
    // The former way to declare hyperparameters: it would be silently ignored.
    throw new Error(
      `method '${name}' (${cls.name}) has static defaultArgs; declare its hyperparameters as static args = defineArgs({ ...Parent.args, name: { kind, default, description } })`,
    );
  }
  registry.set(name, cls);
}

/** Names of every registered method. */
export function methodNames(): string[] {
  return [...registry.keys()].sort();
}

/** The class registered as `name`; a user error naming the allowed names if none. */
export function getMethodClass(name: string): MethodClass {
  const cls = registry.get(name);
  if (!cls) throw invalidValue('method', name, `one of ${methodNames().join(', ')}`);
  return cls;
}

/**
 * The method's hyperparameters: its declared defaults overridden by `overrides`. A name
 * the method does not declare, a non-integer for an integer argument or a value out of
 * its range is a user error naming `method_args.<name>` and what is allowed.
 */
export function resolveMethodArgs(name: string, overrides: MethodArgs): MethodArgs {
  return resolveArgs(getMethodClass(name).args, overrides, name);
}

/**
 * The registered methods (all, or those named) as text: per method a `name (ClassName)`
 * line, its paper, its default recipe (optimizer, lr and weight decay per 256 samples,
 * augmentation, crops), whether it needs labels, then one line per hyperparameter with its kind,
 * default, allowed range and description. Unknown names are user errors.
 */
export function describeMethods(names: readonly string[] = methodNames()): string {
  return names
    .map((name) => {
      const cls = getMethodClass(name);
      const o = cls.optimDefaults;
      return [
        `${name} (${cls.name})`,
        `  paper:  ${cls.paper || '(not given)'}`,
        `  recipe: ${o.optimizer}, lr ${o.lr}, classifier lr ${o.classifierLr}, weight decay ${o.weightDecay}; views '${cls.viewRecipe}'; ${describeCrops(cls.crops)}`,
        `  labels: ${cls.needsLabels ? 'needed (the objective is supervised)' : 'not used by the objective (only by the online classifier and kNN)'}`,
        ...formatArgs(cls.args),
      ].join('\n');
    })
    .join('\n\n');
}

/** `2 global crops`, `1 global crop` or `2 global crops + local crops (default 6)`, for {@link describeMethods}. */
function describeCrops(policy: CropPolicy): string {
  const global = `${policy.globalCrops} global crop${policy.globalCrops === 1 ? '' : 's'}`;
  return policy.multiCrop ? `${global} + local crops (default ${policy.defaultLocalCrops ?? 0})` : global;
}

/** The methods ssl-zoo ships, by name (registered below; user subclasses come on top). */
const BUILT_IN: Record<string, MethodClass> = {
  simclr: SimCLR,
  barlow_twins: BarlowTwins,
  byol: BYOL,
  mocov2plus: MoCoV2Plus,
  mocov3: MoCoV3,
  ressl: ReSSL,
  vicreg: VICReg,
  supcon: SupCon,
  dcl: DCL,
  simsiam: SimSiam,
  nnclr: NNCLR,
  nnbyol: NNBYOL,
  nnsiam: NNSiam,
  wmse: WMSE,
  vibcreg: VIbCReg,
  deepclusterv2: DeepClusterV2,
  swav: SwAV,
  dino: DINO,
  mae: MAE,
  all4one: All4One,
  fastsiam: FastSiam,
  tico: TiCo,
  mmcr: MMCR,
  simdino: SimDINO,
  lejepa: LeJEPA,
  ijepa: IJEPA,
  msn: MSN,
  vicregl: VICRegL,
  ibot: IBOT,
  dinov2: DINOv2,
};
for (const [name, cls] of Object.entries(BUILT_IN)) registerMethod(name, cls);

/** The names of the built-in methods, sorted. */
export const BUILT_IN_METHODS: readonly string[] = Object.keys(BUILT_IN).sort();

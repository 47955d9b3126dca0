/**
 * What "equal to float32 round-off" means for `ssl-train verify`, measured rather than assumed.
 *
 * A training step's gradient is not a smooth function of its inputs at float32 resolution:
 * every ReLU whose pre-activation lies within round-off of zero can take either branch, and
 * one such switch moves a few gradient entries by up to ~10% of their tensor's scale (a row
 * of a head's weight, a bias feeding batch norm) and the first convolution's weight gradient,
 * a sum of ~10⁵ terms of both signs, by ~1e-3 of its largest entry. Two correct float32
 * computations that merely add in a different order, as W ranks and one process do, differ
 * by that much, and the difference then grows with each step at a full learning rate.
 * (Evidence, scripts/verify_roundoff_torch.py on a dumped first step: ssl-zoo's one-process
 * gradient and PyTorch's own float32 one are equally far from the float64 truth, and the
 * W-rank one is as close or closer; moving every input by one float32 ulp moves the float64
 * gradient itself by ~4e-3 of the largest entry, by 1/100 ulp only ~2e-9: a discontinuity.)
 * A fixed tolerance is either too tight for such models or too loose for well-conditioned ones.
 *
 * So verify measures the round-off of the problem at hand: besides the one-process reference
 * it runs {@link ROUNDOFF_TWINS} one-process "twins" on the same batches with the samples in
 * another order ({@link permuteRows}) and every input value, parameter and buffer moved by
 * one float32 ulp ({@link perturbByOneUlp}). A twin computes the same step; the order of
 * every sum over the batch (batch-norm statistics, weight gradients, the loss) and the
 * rounding inside every layer differ, which is what differs between W ranks and one process
 * (reordering alone is not enough: it leaves each sample's own arithmetic as it was, and the
 * twins then miss the switches that the W-rank run's different rounding causes). A correct
 * W-rank run's difference to the reference is therefore a draw from the same distribution as
 * a twin's; the check is statistical, and a rare switch that the W-rank run makes and no twin
 * does defeats it, which is why, on several ranks, the reference and the twins replay the
 * W-rank run's ReLU branches near zero (src/verify/relu-branches.ts) and its neighbour and
 * cluster choices (src/verify/decisions.ts): given the same decisions, what is left is smooth
 * round-off, which a few twins estimate well. The
 * reference and its twins are five correct computations of the step, and the W-rank run is a
 * sixth: its difference to the reference is drawn like the difference between any two of the
 * five, so the round-off is the largest of all ten pairwise differences
 * ({@link largestPairDifference}), not only of the four twin-to-reference ones (ten draws
 * estimate the tail better than four, at no cost). Every step starts the reference and the
 * twins from the W-rank run's state (src/verify/harness.ts), so the differences are each
 * step's own, not earlier steps' carried along and grown at the learning rate. The W-rank
 * run must stay within `factor` times that round-off, or within the fixed
 * `tolerance` floor, whichever is larger. Differences are measured in norm over all tensors
 * ({@link gradientDifference}, {@link stateDifference}), an aggregate that a few twins
 * estimate well, unlike a largest entry that rare switches rule.
 */

/** How many one-process twins estimate the round-off (their largest difference counts). */
export const ROUNDOFF_TWINS = 4;

/** Default multiple of the measured round-off a W-rank difference may reach. */
export const DEFAULT_ROUNDOFF_FACTOR = 4;

/**
 * The rows of `values` (`order.length` rows of equal size, e.g. a batch `[N, H, W, C]` or
 * labels `[N]`) in the order `order`: row i of the result is row `order[i]` of `values`.
 */
export function permuteRows<T extends Float32Array | Int32Array>(values: T, order: Int32Array): T {
  const rowSize = values.length / order.length;
  if (!Number.isInteger(rowSize)) throw new Error(`permuteRows: ${values.length} values do not split into ${order.length} rows`);
  const out = new (values.constructor as { new (n: number): T })(values.length);
  for (let i = 0; i < order.length; i++) out.set(values.subarray(order[i]! * rowSize, (order[i]! + 1) * rowSize), i * rowSize);
  return out;
}

/** A 32-bit integer hash (murmur3's finaliser) of `x`. */
function mix(x: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
/**
 * A copy of `values` with every non-zero entry moved to its float32 neighbour, up or down as
 * a hash of (`key`, index) decides; zeros stay zero. Relative change 2^-24 to 2^-23 per entry.
 */
export function perturbByOneUlp(values: Float32Array, key: number): Float32Array {
  const out = Float32Array.from(values);
  const bits = new Uint32Array(out.buffer);
  const seed = mix(key + 0x9e3779b9);
  for (let i = 0; i < out.length; i++) {
    if (out[i] === 0 || !Number.isFinite(out[i]!)) continue;
    // For IEEE floats, ±1 on the bit pattern is the next value away from / towards zero.
    bits[i] = (bits[i]! + (mix(seed ^ i) & 1 ? 1 : -1)) >>> 0;
  }
  return out;
}

type Values = Float32Array | Int32Array | Uint8Array;

/** A difference between two sets of tensors, and the tensor that contributes most to it. */
export interface Difference {
  /** The relative difference (see the function that computed it). */
  value: number;
  /** The tensor with the largest share of the squared difference ('' when there is none). */
  tensor: string;
}

/** `Σ (a − b)²` per tensor name, `Infinity` for a tensor missing from `a`. */
function squaredDifferences(a: Record<string, Values>, reference: Record<string, Values>): Array<[string, number]> {
  return Object.entries(reference).map(([name, ref]) => {
    const other = a[name];
    if (!other || other.length !== ref.length) return [name, Infinity];
    let sum = 0;
    for (let i = 0; i < ref.length; i++) sum += (other[i]! - ref[i]!) ** 2;
    return [name, Number.isNaN(sum) ? Infinity : sum];
  });
}

function relativeNorm(a: Record<string, Values>, reference: Record<string, Values>, scaleSquared: number): Difference {
  let sum = 0;
  let tensor = '';
  let largest = -1;
  for (const [name, d] of squaredDifferences(a, reference)) {
    sum += d;
    if (d > largest) [largest, tensor] = [d, name];
  }
  return { value: scaleSquared === 0 ? Math.sqrt(sum) : Math.sqrt(sum / scaleSquared), tensor };
}

/**
 * The gradients' relative difference in norm, all parameters at once:
 * `‖a − ref‖₂ / ‖ref‖₂` over the concatenation of every gradient tensor.
 *
 * Why a norm and not the largest entry: one ReLU whose pre-activation lies within round-off
 * of zero switches between two correct float32 runs, and moves a few entries of a few
 * tensors by up to ~10% of that tensor's scale (a bias feeding batch norm, one row of a head's
 * weight); where such a switch happens is chance. A largest-entry statistic is then ruled by
 * these rare events and can't be estimated from a couple of round-off twins, while the norm
 * over all gradients adds up many small contributions and is as stable between runs as the
 * twins need. A real bug (a 1/W scale, a gather backward that keeps the local slice, per-rank
 * statistics) changes the gradients everywhere and shows in the norm at 10 to 100 times the
 * round-off. A tensor missing from `a` counts as an infinite difference.
 */
export function gradientDifference(a: Record<string, Values>, reference: Record<string, Values>): Difference {
  let scale = 0;
  for (const ref of Object.values(reference)) for (let i = 0; i < ref.length; i++) scale += ref[i]! ** 2;
  return relativeNorm(a, reference, scale);
}

/**
 * The state's relative difference in norm (parameters, buffers and method state after some
 * steps), measured against how far training moved it: `‖a − ref‖₂ / ‖ref − start‖₂` over all
 * tensors at once. What the steps changed is what the contract is about; measured against the
 * weights themselves, a wrong update would shrink by the ratio of the update to the weights
 * (about 1e-2 per step). Absolute when nothing moved.
 */
export function stateDifference(a: Record<string, Values>, reference: Record<string, Values>, start: Record<string, Values>): Difference {
  let moved = 0;
  for (const [name, ref] of Object.entries(reference)) {
    const s = start[name];
    if (!s) continue;
    for (let i = 0; i < ref.length; i++) moved += (ref[i]! - s[i]!) ** 2;
  }
  return relativeNorm(a, reference, moved);
}

/** |a − b| / |b| (absolute when b is 0). */
export function scalarDifference(a: number, reference: number): number {
  const diff = Math.abs(a - reference);
  return reference === 0 ? diff : diff / Math.abs(reference);
}

/**
 * The largest `difference(later, earlier)` over every pair of `runs` (each pair once; with
 * the reference first, its pairs are measured against it as their reference).
 */
export function largestPairDifference<T>(runs: T[], difference: (a: T, reference: T) => number): number {
  let largest = 0;
  for (let i = 0; i < runs.length; i++) for (let j = i + 1; j < runs.length; j++) largest = Math.max(largest, difference(runs[j]!, runs[i]!));
  return largest;
}

/** The largest difference a W-rank value may show: `factor` × the measured round-off, at least `tolerance`. */
export function roundoffBound(roundoff: number, factor: number, tolerance: number): number {
  return Math.max(tolerance, factor * roundoff);
}

/** How far `difference` is into its `bound` (passes at <= 1); a NaN difference is infinitely far. */
export function boundRatio(difference: number, bound: number): number {
  return Number.isNaN(difference) ? Infinity : difference / bound;
}

/**
 * What "equal to float32 round-off" means for `ssl-train verify`, measured rather than assumed.
 *
 * A training step's gradient is not a smooth function of its inputs at float32 resolution:
 * every ReLU whose pre-activation lies within round-off of zero can take either branch, and
 * a weight-gradient entry is a sum of hundreds of thousands of terms of both signs, so one
 * flipped unit moves it by up to ~1e-3 of the largest gradient entry. (Measured on
 * `tiny_resnet` SimCLR at batch 256 in float64: moving every input value by one float32 ulp
 * moves `conv1.weight`'s gradient by 5.9e-4 of the largest entry; moving it by 1/100 ulp,
 * by 1.8e-9. PyTorch's own float32 step is 2.0e-3 away from float64 there.) Two correct
 * float32 computations that merely add in a different order, as W ranks and one process do,
 * therefore differ by that much, and the difference then grows with each step at a full
 * learning rate. A fixed tolerance is either too tight for such models or too loose for the
 * well-conditioned ones.
 *
 * So verify measures the round-off of the problem at hand: besides the one-process reference
 * it runs {@link ROUNDOFF_TWINS} one-process "twins" on the same batches with every input
 * value moved by one float32 ulp (a perturbation as large as the rounding of the inputs
 * themselves), and the W-rank run must stay within `factor` times the largest twin-to-
 * reference difference, or within the fixed `tolerance` floor, whichever is larger.
 */

/** How many perturbed one-process twins estimate the round-off (their largest difference counts). */
export const ROUNDOFF_TWINS = 2;

/** Default multiple of the measured round-off a W-rank difference may reach. */
export const DEFAULT_ROUNDOFF_FACTOR = 4;

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

/**
 * Largest difference between matching gradients, relative to the largest reference entry of
 * any tensor (a single global scale: a gradient that is analytically zero, e.g. a bias feeding
 * batch norm, holds only float noise and must not be compared relative to itself). A tensor
 * missing from `a` counts as an infinite difference.
 */
export function gradientDifference(a: Record<string, Values>, reference: Record<string, Values>): number {
  let diff = 0;
  let scale = 0;
  for (const [name, ref] of Object.entries(reference)) {
    const other = a[name];
    for (let i = 0; i < ref.length; i++) {
      diff = Math.max(diff, other ? Math.abs(other[i]! - ref[i]!) : Infinity);
      scale = Math.max(scale, Math.abs(ref[i]!));
    }
  }
  return scale === 0 ? diff : diff / scale;
}

/**
 * Largest difference between matching state tensors (parameters, buffers, optimizer or
 * method state), each relative to its own largest reference entry (absolute when that is 0):
 * tensors of very different magnitudes (weights, running variances, step counters) each
 * count on their own scale.
 */
export function stateDifference(a: Record<string, Values>, reference: Record<string, Values>): number {
  let worst = 0;
  for (const [name, ref] of Object.entries(reference)) {
    const other = a[name];
    if (!other) return Infinity;
    let diff = 0;
    let scale = 0;
    for (let i = 0; i < ref.length; i++) {
      diff = Math.max(diff, Math.abs(other[i]! - ref[i]!));
      scale = Math.max(scale, Math.abs(ref[i]!));
    }
    worst = Math.max(worst, scale === 0 ? diff : diff / scale);
  }
  return worst;
}

/** |a − b| / |b| (absolute when b is 0). */
export function scalarDifference(a: number, reference: number): number {
  const diff = Math.abs(a - reference);
  return reference === 0 ? diff : diff / Math.abs(reference);
}

/** The largest difference a W-rank value may show: `factor` × the measured round-off, at least `tolerance`. */
export function roundoffBound(roundoff: number, factor: number, tolerance: number): number {
  return Math.max(tolerance, factor * roundoff);
}


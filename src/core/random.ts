/**
 * Seeded random numbers. Every random draw in ssl-zoo (initialisation, sampling,
 * augmentation) comes from an {@link Rng}, and the draws that must not depend on the
 * world size come from {@link Rng.keyed}, keyed by (seed, epoch, global sample index,
 * view), so that the same sample gets the same views on any number of ranks.
 *
 * The generator is sfc32 (32-bit small fast counting generator, 128-bit state), seeded
 * through a murmur3-style mix of the key words.
 */

export type RngState = [number, number, number, number];

function mix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Hashes a list of integers (each reduced to 32 bits, high bits folded in) to 32 bits. */
export function hashKey(words: readonly number[], salt = 0x9e3779b9): number {
  let h = salt >>> 0;
  for (const w of words) {
    const lo = w >>> 0;
    const hi = Math.floor(w / 0x100000000) >>> 0;
    h = mix32(h ^ Math.imul(lo, 0xcc9e2d51));
    h = mix32((h + Math.imul(hi ^ 0x1b873593, 0x27d4eb2f)) >>> 0);
  }
  return h;
}

export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  private spareNormal: number | undefined;

  /** A generator seeded by one integer. */
  constructor(seed: number) {
    this.a = hashKey([seed], 0x243f6a88);
    this.b = hashKey([seed], 0x85a308d3);
    this.c = hashKey([seed], 0x13198a2e);
    this.d = hashKey([seed], 0x03707344);
    for (let i = 0; i < 12; i++) this.nextUint32();
  }

  /** A generator that depends only on the key, e.g. `Rng.keyed(seed, epoch, index, view)`. */
  static keyed(...key: number[]): Rng {
    const rng = new Rng(0);
    rng.setState([hashKey(key, 0x243f6a88), hashKey(key, 0x85a308d3), hashKey(key, 0x13198a2e), hashKey(key, 0x03707344)]);
    for (let i = 0; i < 12; i++) rng.nextUint32();
    return rng;
  }

  /** A uniformly distributed 32-bit unsigned integer. */
  nextUint32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t;
  }

  /** Uniform in [0, 1) with 32 bits of resolution. */
  uniform(): number {
    return this.nextUint32() / 0x100000000;
  }

  /** Uniform in [lo, hi). */
  uniformIn(lo: number, hi: number): number {
    return lo + (hi - lo) * this.uniform();
  }

  /** An integer uniform in [0, n). */
  int(n: number): number {
    return Math.floor(this.uniform() * n);
  }

  /** True with probability p. */
  bernoulli(p: number): boolean {
    return this.uniform() < p;
  }

  /** A standard normal draw (Box-Muller, the second value cached). */
  normal(): number {
    if (this.spareNormal !== undefined) {
      const z = this.spareNormal;
      this.spareNormal = undefined;
      return z;
    }
    let u = this.uniform();
    while (u <= 1e-12) u = this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spareNormal = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** `n` normal draws with the given mean and standard deviation. */
  normalArray(n: number, mean = 0, std = 1): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = mean + std * this.normal();
    return out;
  }

  /** `n` uniform draws in [lo, hi). */
  uniformArray(n: number, lo = 0, hi = 1): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = this.uniformIn(lo, hi);
    return out;
  }

  /** A uniformly random permutation of 0..n-1 (Fisher-Yates). */
  permutation(n: number): Int32Array {
    const p = new Int32Array(n);
    for (let i = 0; i < n; i++) p[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const t = p[i];
      p[i] = p[j];
      p[j] = t;
    }
    return p;
  }

  /** The generator's state, for checkpoints (the cached normal is dropped). */
  getState(): RngState {
    return [this.a, this.b, this.c, this.d];
  }

  /** Restores a state from {@link getState}. */
  setState(state: RngState): void {
    [this.a, this.b, this.c, this.d] = state.map((x) => x >>> 0) as RngState;
    this.spareNormal = undefined;
  }
}

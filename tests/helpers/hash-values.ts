/**
 * The integer hash the PyTorch fixture generators (scripts/gen_backbone_fixtures.py,
 * scripts/gen_vit_fixtures.py) fill weights and inputs from, so fixtures hold only results.
 */

/** The generators' key of a name: `k = k·31 + charCode` (mod 2³²). */
export function nameKey(name: string): number {
  let k = 0;
  for (const c of name) k = (Math.imul(k, 31) + c.charCodeAt(0)) >>> 0;
  return k;
}

/** `n` values in [-1, 1): the murmur3-finalised hash of (index · golden ratio + key). */
export function hashUniform(key: number, n: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    let h = (Math.imul(i, 0x9e3779b1) + key) >>> 0;
    h = (h ^ (h >>> 16)) >>> 0;
    h = Math.imul(h, 0x85ebca6b) >>> 0;
    h = (h ^ (h >>> 13)) >>> 0;
    h = Math.imul(h, 0xc2b2ae35) >>> 0;
    h = (h ^ (h >>> 16)) >>> 0;
    out.push((h / 2 ** 32) * 2 - 1);
  }
  return out;
}

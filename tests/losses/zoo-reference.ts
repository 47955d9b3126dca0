/**
 * Independent float64 reference computations of the zoo loss tests, in plain JS loops over
 * nested arrays (no tfjs): row normalisation, dot products, log-sum-exp, and the SupCon and
 * DCL(W) losses written the way their papers write them.
 */

export function normalize(rows: number[][]): number[][] {
  return rows.map((row) => {
    const n = Math.hypot(...row);
    return row.map((x) => x / n);
  });
}

export function dot(a: number[], b: number[]): number {
  return a.reduce((s, x, i) => s + x * b[i]!, 0);
}

export function logSumExp(xs: number[]): number {
  const m = Math.max(...xs);
  return m + Math.log(xs.reduce((s, x) => s + Math.exp(x - m), 0));
}

/** log_softmax of a row. */
export function logSoftmax(xs: number[]): number[] {
  const l = logSumExp(xs);
  return xs.map((x) => x - l);
}

/** SupCon as solo-learn: −mean over all V·N anchors of log(pos / (pos + neg)), exp then log. */
export function referenceSupcon(views: number[][][], labels: number[], t: number): number {
  const z = normalize(views.flat());
  const lab = views.flatMap(() => labels);
  let total = 0;
  for (let i = 0; i < z.length; i++) {
    let pos = 0;
    let neg = 0;
    for (let j = 0; j < z.length; j++) {
      if (j === i) continue;
      const e = Math.exp(dot(z[i]!, z[j]!) / t);
      if (lab[j] === lab[i]) pos += e;
      else neg += e;
    }
    total -= Math.log(pos / (pos + neg));
  }
  return total / z.length;
}

/**
 * DCL (weights undefined) or DCLW (σ given: w = 2 − N·softmax(s_ii/σ)), symmetric, as Eq. 6 of
 * Yeh et al.: −w_i s_ii/τ + log Σ_{j≠i} [exp(s(a_i, a_j)/τ) + exp(s(a_i, b_j)/τ)], mean over 2N anchors.
 */
export function referenceDcl(z1: number[][], z2: number[][], t: number, sigma?: number): number {
  const [a, b] = [normalize(z1), normalize(z2)];
  const n = a.length;
  let w = a.map(() => 1);
  if (sigma !== undefined) {
    const s = a.map((row, i) => dot(row, b[i]!) / sigma);
    const l = logSumExp(s);
    w = s.map((x) => 2 - n * Math.exp(x - l));
  }
  let total = 0;
  for (const [x, y] of [
    [a, b],
    [b, a],
  ] as const) {
    for (let i = 0; i < n; i++) {
      const negatives: number[] = [];
      for (let j = 0; j < n; j++) {
        if (j === i) continue;
        negatives.push(dot(x[i]!, x[j]!) / t, dot(x[i]!, y[j]!) / t);
      }
      total += -w[i]! * (dot(x[i]!, y[i]!) / t) + logSumExp(negatives);
    }
  }
  return total / (2 * n);
}

/**
 * Memory-bounded NT-Xent: the same loss, values and gradients as `ntXentLoss`, computed in
 * tiles of the similarity matrix (Inf-CL style, Cheng et al. 2024) so that the `[2B, 2N]`
 * logits and their gradient are never materialised.
 *
 * - Forward: for every tile of local anchors × gathered candidates, a running (online)
 *   log-sum-exp per anchor row: `m ← max(m, max_j s_ij)`, `l ← l·e^{m_old − m} + Σ_j e^{s_ij − m}`,
 *   and the positive logit picked where the tile holds it. Kept between tiles: `[2B]` vectors.
 * - Backward (`tf.customGrad`): the tiles are recomputed, not stored. For anchor i,
 *   `∂loss/∂s_ij = (softmax_ij − [j = pos(i)]) / (2B)` with `softmax_ij = e^{(s_ij − m_i) − log l_i}`, and
 *   `s = a cᵀ / τ`, so `∂a_i += Σ_j g_ij c_j / τ` and `∂c_j += Σ_i g_ij a_i / τ`, accumulated
 *   over tiles.
 * - The differentiable gather (`gatherRows`, backward reduce-scatter SUM) stays OUTSIDE the
 *   custom op and gathers the RAW rows; the op normalises rows itself (`l2NormalizeRows`,
 *   row by row, so the candidates equal the plain loss's gathered normalised rows) and
 *   back-propagates through the normalisation in closed form. Its gradient w.r.t. the
 *   gathered rows then flows back through `gatherRows` exactly as in the plain loss (the
 *   normalisation's backward is linear in the incoming gradient, so normalising after the
 *   gather instead of before changes nothing but round-off). The normalised rows are
 *   recomputed in the backward, not stored.
 *
 * Memory: O(N·D) (inputs, gathered candidates, normalised rows and their gradients) plus a few
 * tiles of `tileSize²` floats; nothing of size B·N.
 */
import { invalidValue } from '../core/errors.js';
import { tf, type Scalar, type Tensor } from '../core/tf.js';
import type { ProcessGroup } from '../core/process-group.js';
import { batchLayout, gatherRows, type BatchLayout } from './global-batch.js';
import { MASKED_LOGIT } from './nt-xent.js';
import { checkPair, l2NormalizeRows } from './ops.js';

/** Default side of a square tile of the similarity matrix: 1024² floats, 4 MiB. */
export const NT_XENT_DEFAULT_TILE_SIZE = 1024;

export interface NtXentTiledOptions {
  /** Softmax temperature τ > 0. */
  temperature: number;
  /**
   * Side of a (square) tile of the `[2B, 2N]` similarity matrix: tiles are
   * `[tileSize, tileSize]` (smaller at the edges; any size works, it need not divide 2B or
   * 2N). Default {@link NT_XENT_DEFAULT_TILE_SIZE}.
   */
  tileSize?: number;
}

/**
 * NT-Xent computed in tiles, never materialising the `[2B, 2N]` logits. Same contract as
 * `ntXentLoss` (see there): `z1`, `z2` `[B, D]` float32, rows L2-normalised, anchors
 * `[z1; z2]` `[2B, D]` against the gathered candidates `[Z1; Z2]` `[2N, D]`, positive of local
 * row i (view 1) at global column N + r·B + i, self at r·B + i (and the mirror for view 2);
 * returns the mean over the 2B local anchors, a scalar `[]`. With a group (W > 1) the
 * candidates are gathered with `gatherRows` (backward reduce-scatter SUM), as in the plain loss.
 *
 * Peak memory is O(N·D + tileSize²) instead of O(B·N).
 */
export function ntXentLossTiled(z1: tf.Tensor2D, z2: tf.Tensor2D, options: NtXentTiledOptions, group?: ProcessGroup): Scalar {
  checkPair('ntXentLossTiled', ['z1', 'z2'], z1, z2);
  const { temperature } = options;
  if (!(Number.isFinite(temperature) && temperature > 0)) {
    throw invalidValue('temperature', temperature, 'a number > 0');
  }
  const tileSize = options.tileSize ?? NT_XENT_DEFAULT_TILE_SIZE;
  if (!(Number.isInteger(tileSize) && tileSize >= 1)) throw invalidValue('tileSize', tileSize, 'a positive integer');
  const layout = batchLayout('ntXentLossTiled', z1.shape[0], group);
  return tf.tidy(() =>
    // The gather is of the raw rows (differentiable: backward reduce-scatter SUM); rows are
    // normalised inside the op, row by row, so the candidates are exactly the gathered
    // normalised rows of the plain loss. One process: the candidates are z1, z2 themselves.
    tiledNtXent(layout.worldSize === 1 ? [z1, z2] : [z1, z2, gatherRows(z1, layout), gatherRows(z2, layout)], layout, temperature, tileSize),
  );
}

/** ε of the row normalisation, as `l2NormalizeRows`'s default. */
const NORM_EPS = 1e-12;

/**
 * Gradient of `l2NormalizeRows(x)` (`x · rsqrt(max(Σx², ε²))`) w.r.t. `x` given the gradient
 * `g` w.r.t. its output, the derivative autodiff takes of that expression:
 * `g·r − x·(g·x)·r³·[Σx² ≥ ε²]` with `r = rsqrt(max(Σx², ε²))` (tfjs's `maximum` sends the
 * gradient to its first argument on ties). `[rows, D]`.
 */
function l2NormalizeRowsGrad(x: tf.Tensor2D, g: Tensor): Tensor {
  return tf.tidy(() => {
    const sumSq = tf.sum(tf.square(x), 1, true);
    const r = tf.rsqrt(tf.maximum(sumSq, NORM_EPS * NORM_EPS));
    const through = tf.cast(tf.greaterEqual(sumSq, NORM_EPS * NORM_EPS), 'float32');
    const gx = tf.sum(tf.mul(g, x), 1, true);
    return tf.sub(tf.mul(g, r), tf.mul(x, tf.mul(tf.mul(gx, tf.pow(r, 3)), through)));
  });
}

/** Rows (or columns) `[start, start + size)` of view `view`'s block; `global` = view·blockSize + start. */
interface Span {
  view: number;
  start: number;
  size: number;
  global: number;
}

/** Tiles of two view blocks of `block` rows each; no tile straddles the two views. */
function spans(block: number, tile: number): Span[] {
  const out: Span[] = [];
  for (let view = 0; view < 2; view++) {
    for (let start = 0; start < block; start += tile) {
      out.push({ view, start, size: Math.min(tile, block - start), global: view * block + start });
    }
  }
  return out;
}

/**
 * Per local anchor row `r` (0..2B−1), the global candidate column of its self-similarity and
 * of its positive (`ntXentMasks` as column indices).
 */
function specialColumns(layout: BatchLayout): { self: Int32Array; positive: Int32Array } {
  const { localBatch: b, globalBatch: n, offset } = layout;
  const self = new Int32Array(2 * b);
  const positive = new Int32Array(2 * b);
  for (let i = 0; i < b; i++) {
    self[i] = offset + i;
    positive[i] = n + offset + i;
    self[b + i] = n + offset + i;
    positive[b + i] = offset + i;
  }
  return { self, positive };
}

/**
 * Bool `[rows.size, cols.size]` mask, true where a tile column is the global column
 * `columns[r]` of its row, or undefined when no row of the tile has its column inside the tile
 * (the common case: only tiles that cross a self or positive column pay for a mask).
 */
function tileMask(columns: Int32Array, rows: Span, cols: Span): tf.Tensor2D | undefined {
  const local = new Int32Array(rows.size);
  let any = false;
  for (let k = 0; k < rows.size; k++) {
    const c = columns[rows.global + k]! - cols.global;
    local[k] = c >= 0 && c < cols.size ? c : -1; // -1 matches no column
    any ||= local[k]! >= 0;
  }
  if (!any) return undefined;
  return tf.tidy(() => tf.equal(tf.expandDims(tf.tensor1d(local, 'int32'), 1), tf.expandDims(tf.range(0, cols.size, 1, 'int32'), 0))) as tf.Tensor2D;
}

/** The tile's logits `a cᵀ / τ` with the self entries set to MASKED_LOGIT: `[rows, cols]`. */
function tileLogits(aRows: tf.Tensor2D, cCols: tf.Tensor2D, temperature: number, selfCols: Int32Array, rows: Span, cols: Span): tf.Tensor2D {
  return tf.tidy(() => {
    const s = tf.div(tf.matMul(aRows, cCols, false, true), temperature) as tf.Tensor2D;
    const selfMask = tileMask(selfCols, rows, cols);
    if (!selfMask) return s;
    return tf.where(selfMask, tf.fill(s.shape, MASKED_LOGIT), s);
  });
}

/** `f(x)`, disposing `x`: keeps at most two tile-sized tensors alive per step. */
function consume<T extends Tensor>(x: Tensor, f: (x: Tensor) => T): T {
  const y = tf.tidy(() => f(x));
  x.dispose();
  return y;
}

/** Rows `span` of the view block it belongs to: `[span.size, D]`. */
function rowsOf(blocks: tf.Tensor2D[], span: Span): tf.Tensor2D {
  return tf.slice(blocks[span.view]!, [span.start, 0], [span.size, -1]);
}

/**
 * The custom op. Inputs: the raw views `z1`, `z2` `[B, D]` (anchors `[n1; n2]` after row
 * normalisation), and with W > 1 the gathered raw views `G1`, `G2` `[N, D]` (candidates; with
 * one process the candidates are the anchors). Returns the mean over the 2B anchors of
 * `(m_i − s_{i,pos(i)}) + log l_i` (log-sum-exp = m + log l); the gradient goes to every
 * input, through the normalisation.
 */
function tiledNtXent(inputs: tf.Tensor2D[], layout: BatchLayout, temperature: number, tileSize: number): Scalar {
  const numAnchors = 2 * layout.localBatch;
  const rowSpans = spans(layout.localBatch, tileSize);
  const colSpans = spans(layout.globalBatch, tileSize);
  const { self: selfCols, positive: posCols } = specialColumns(layout);
  const gathered = inputs.length === 4;

  /** Normalised anchors and candidates (the same tensors with one process). */
  const normalised = (raw: tf.Tensor2D[]): { a: tf.Tensor2D[]; c: tf.Tensor2D[] } => {
    const a = [l2NormalizeRows(raw[0]!, NORM_EPS), l2NormalizeRows(raw[1]!, NORM_EPS)];
    const c = gathered ? [l2NormalizeRows(raw[2]!, NORM_EPS), l2NormalizeRows(raw[3]!, NORM_EPS)] : a;
    return { a, c };
  };

  const op = tf.customGrad((...args: Array<Tensor | tf.GradSaveFunc>) => {
    const raw = args.slice(0, inputs.length) as tf.Tensor2D[];
    const save = args[inputs.length] as tf.GradSaveFunc;
    const { a, c } = normalised(raw);
    // Forward: per row tile, an online log-sum-exp over the column tiles.
    const maxParts: Tensor[] = [];
    const logSumParts: Tensor[] = [];
    const posParts: Tensor[] = [];
    for (const rows of rowSpans) {
      const aRows = rowsOf(a, rows);
      let m: Tensor | undefined; // running row max [rows]
      let l: Tensor | undefined; // running Σ e^{s − m} [rows]
      let pos = tf.zeros([rows.size]); // positive logit [rows]
      for (const cols of colSpans) {
        const next = tf.tidy(() => {
          const s = tileLogits(aRows, rowsOf(c, cols), temperature, selfCols, rows, cols);
          const posMask = tileMask(posCols, rows, cols);
          const pos2 = posMask ? tf.add(pos, tf.sum(tf.mul(s, tf.cast(posMask, 'float32')), 1)) : tf.clone(pos);
          const tileMax = tf.max(s, 1);
          const m2 = m ? tf.maximum(m, tileMax) : tileMax;
          const tileSum = tf.sum(tf.exp(tf.sub(s, tf.expandDims(m2, 1))), 1);
          const l2 = m && l ? tf.add(tf.mul(l, tf.exp(tf.sub(m, m2))), tileSum) : tileSum;
          return [m2, l2, pos2];
        });
        tf.dispose([m, l, pos] as Tensor[]);
        [m, l, pos] = next as [Tensor, Tensor, Tensor];
      }
      maxParts.push(m!);
      logSumParts.push(tf.log(l!));
      posParts.push(pos);
      tf.dispose([aRows, l!]);
    }
    tf.dispose(gathered ? [...a, ...c] : a);
    // log-sum-exp_i = max_i + logSum_i, kept apart: (s − max) − logSum and (max − positive) +
    // logSum lose less to round-off than differences with a rounded lse (as logSoftmax does).
    const rowMax = tf.concat(maxParts, 0); // [2B]
    const logSum = tf.concat(logSumParts, 0); // [2B]
    const positive = tf.concat(posParts, 0); // [2B]
    tf.dispose([...maxParts, ...logSumParts, ...posParts]);
    const value = tf.tidy(() => tf.mean(tf.add(tf.sub(rowMax, positive), logSum))) as Scalar;
    positive.dispose();
    save([...raw, rowMax, logSum]);

    const gradFunc = (dy: Tensor | Tensor[], saved: Tensor[]): Tensor[] => {
      const sraw = saved.slice(0, inputs.length) as tf.Tensor2D[];
      const [sMax, sLogSum] = saved.slice(inputs.length) as [tf.Tensor1D, tf.Tensor1D];
      const { a: sa, c: sc } = normalised(sraw); // recomputed, not stored
      // ∂loss/∂s_ij · ∂s/∂(a or c) = (softmax − onehot(pos)) · dy / (2B · τ)
      const coef = tf.div(dy as Tensor, numAnchors * temperature);
      const dA: Array<Tensor | undefined> = rowSpans.map(() => undefined);
      const dC: Tensor[] = [];
      for (const cols of colSpans) {
        const cCols = rowsOf(sc, cols);
        let dCTile: Tensor | undefined;
        rowSpans.forEach((rows, k) => {
          const aRows = rowsOf(sa, rows);
          // Tile-sized temporaries are freed as soon as they are used (at most two alive).
          const s = tileLogits(aRows, cCols, temperature, selfCols, rows, cols);
          const softmax = consume(s, (x) => {
            const column = (v: tf.Tensor1D) => tf.expandDims(tf.slice(v, [rows.global], [rows.size]), 1);
            return tf.exp(tf.sub(tf.sub(x, column(sMax)), column(sLogSum)));
          });
          const g = consume(softmax, (x) => {
            const posMask = tileMask(posCols, rows, cols);
            return tf.mul(posMask ? tf.sub(x, tf.cast(posMask, 'float32')) : x, coef);
          });
          const [dAk, dCk] = tf.tidy(() => {
            const da = tf.matMul(g, cCols); // [rows, D]
            const dc = tf.matMul(g, aRows, true, false); // [cols, D]
            return [dA[k] ? tf.add(dA[k]!, da) : da, dCTile ? tf.add(dCTile, dc) : dc];
          });
          tf.dispose([g, aRows]);
          tf.dispose([dA[k], dCTile] as Tensor[]);
          dA[k] = dAk;
          dCTile = dCk;
        });
        dC.push(dCTile!);
        cCols.dispose();
      }
      tf.dispose(gathered ? [coef, ...sa, ...sc] : [coef, ...sa]);
      // Per view: concatenate the tiles (spans are ordered view 0, then view 1), then back
      // through the row normalisation.
      const viewGrad = (parts: Tensor[], spanList: Span[], view: number): Tensor => {
        const mine = parts.filter((_, k) => spanList[k]!.view === view);
        const whole = mine.length === 1 ? mine[0]! : tf.concat(mine, 0);
        if (mine.length > 1) tf.dispose(mine);
        return whole;
      };
      const grads: Tensor[] = [];
      for (const view of [0, 1]) {
        let gA = viewGrad(dA as Tensor[], rowSpans, view);
        if (!gathered) {
          // One process: a candidate is an anchor, its two gradients add.
          const gC = viewGrad(dC, colSpans, view);
          const sum = tf.add(gA, gC);
          tf.dispose([gA, gC]);
          gA = sum;
        }
        grads.push(l2NormalizeRowsGrad(sraw[view]!, gA));
        gA.dispose();
      }
      if (gathered) {
        for (const view of [0, 1]) {
          const gC = viewGrad(dC, colSpans, view);
          grads.push(l2NormalizeRowsGrad(sraw[2 + view]!, gC));
          gC.dispose();
        }
      }
      return grads;
    };
    return { value, gradFunc };
  });
  return op(...inputs) as Scalar;
}

/**
 * The page's probe of the representation, for a folder with class sub-folders: the backbone's
 * features of a labelled subset, their leave-one-out kNN top-1 accuracy, and a UMAP of them
 * drawn on a canvas, coloured by class. Runs in the page; nothing is sent anywhere.
 */
import { UMAP } from './umap.js';

/** Images probed at most (evenly spaced over the folder's sorted list). */
export const PROBE_IMAGES = 256;
/** Neighbours that vote, and the temperature of their votes (solo-learn's weighted kNN: exp(similarity / T)). */
const KNN_K = 10;
const KNN_TEMPERATURE = 0.07;
/** Class colours of the scatter (repeated past ten classes). */
const COLOURS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

/** Up to {@link PROBE_IMAGES} rows of `length`, evenly spaced. */
export function probeRows(length) {
  const count = Math.min(length, PROBE_IMAGES);
  return Int32Array.from({ length: count }, (_, k) => Math.floor((k * length) / count));
}

/** Rows of `values` (`[n, dim]`) scaled to unit length. */
function normalise(values, n, dim) {
  const out = new Float32Array(values.length);
  for (let i = 0; i < n; i++) {
    let norm = 0;
    for (let j = 0; j < dim; j++) norm += values[i * dim + j] ** 2;
    const scale = 1 / Math.max(Math.sqrt(norm), 1e-12);
    for (let j = 0; j < dim; j++) out[i * dim + j] = values[i * dim + j] * scale;
  }
  return out;
}

/**
 * Leave-one-out kNN top-1 accuracy of features `values` (`[labels.length, dim]`): each image is
 * classified by its `k` most cosine-similar other images, each voting for its class with weight
 * exp(similarity / 0.07); the fraction whose vote is their own class.
 */
export function knnLeaveOneOut(values, dim, labels, numClasses, k = KNN_K) {
  const n = labels.length;
  const unit = normalise(values, n, dim);
  const neighbours = Math.min(k, n - 1);
  let correct = 0;
  for (let i = 0; i < n; i++) {
    const similarity = [];
    for (let j = 0; j < n; j++) {
      if (j === i) continue;
      let dot = 0;
      for (let d = 0; d < dim; d++) dot += unit[i * dim + d] * unit[j * dim + d];
      similarity.push([dot, j]);
    }
    similarity.sort((a, b) => b[0] - a[0]);
    const votes = new Float64Array(numClasses);
    for (const [dot, j] of similarity.slice(0, neighbours)) votes[labels[j]] += Math.exp(dot / KNN_TEMPERATURE);
    let best = 0;
    for (let c = 1; c < numClasses; c++) if (votes[c] > votes[best]) best = c;
    if (best === labels[i]) correct++;
  }
  return { accuracy: correct / n, k: neighbours, images: n };
}

/** A seeded uniform [0, 1) generator (mulberry32), so that a step's UMAP is the same every time. */
function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The 2-D UMAP (umap-js) of features `values` (`[n, dim]`): `[n][2]`. */
export function umap2d(values, n, dim, seed = 0) {
  const rows = Array.from({ length: n }, (_, i) => Array.from(values.subarray(i * dim, (i + 1) * dim)));
  return new UMAP({ nComponents: 2, nNeighbors: Math.max(2, Math.min(15, n - 1)), minDist: 0.1, random: seededRandom(seed) }).fit(rows);
}

/** Draws `points` (`[n][2]`) on `canvas`, coloured by `labels`, with a legend of `classNames`. */
export function drawScatter(canvas, points, labels, classNames) {
  const context = canvas.getContext('2d');
  const { width, height } = canvas;
  context.fillStyle = '#fff';
  context.fillRect(0, 0, width, height);
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const margin = 16;
  const legend = 120;
  const sx = (x) => margin + ((x - x0) / (x1 - x0 || 1)) * (width - legend - 2 * margin);
  const sy = (y) => height - margin - ((y - y0) / (y1 - y0 || 1)) * (height - 2 * margin);
  points.forEach(([x, y], i) => {
    context.fillStyle = COLOURS[labels[i] % COLOURS.length];
    context.beginPath();
    context.arc(sx(x), sy(y), 4, 0, 2 * Math.PI);
    context.fill();
  });
  context.font = '12px sans-serif';
  classNames.forEach((name, c) => {
    context.fillStyle = COLOURS[c % COLOURS.length];
    context.fillRect(width - legend, margin + 18 * c, 10, 10);
    context.fillStyle = '#222';
    context.fillText(name, width - legend + 16, margin + 18 * c + 10);
  });
}

import { invalidValue } from '../core/errors.js';
import { epochPermutation, type Sampler } from '../data/sampler.js';

export interface DistributedSamplerOptions {
  /** Dataset size. */
  length: number;
  seed: number;
  rank: number;
  worldSize: number;
  /** Samples per batch on each rank (B); the global batch is N = W·B. */
  localBatch: number;
  /**
   * Drop the last, incomplete global batch (default). Otherwise it is completed by
   * wrapping around to the start of the epoch's permutation, so every rank still gets B
   * (PyTorch's padding). That is not what one process does (a short last batch), so
   * `ssl-train` refuses `--drop-last false` with more than one rank.
   */
  dropLast?: boolean;
}

/**
 * Shards each epoch's permutation (the same `epochPermutation(length, seed, epoch)` a
 * one-process `RandomSampler` uses) so that rank r's b-th batch is the slice
 * `[b·N + r·B, b·N + (r+1)·B)` of the permutation. Concatenating the ranks' b-th batches in
 * rank order gives exactly the one-process b-th batch of size N, which is what makes a
 * W-rank step equal a one-process step on the global batch (docs/design.md contract 1; with
 * augmentation keyed by the global sample index, the views match too). Every rank gets
 * the same number of samples, as a mean of per-rank means needs.
 */
export class DistributedSampler implements Sampler {
  readonly length: number;
  private readonly globalBatches: number;

  constructor(private readonly options: DistributedSamplerOptions) {
    const { length, rank, worldSize, localBatch } = options;
    if (!Number.isInteger(worldSize) || worldSize < 1) throw invalidValue('worldSize', worldSize, 'an integer >= 1');
    if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) throw invalidValue('rank', rank, `an integer in [0, ${worldSize - 1}]`);
    if (!Number.isInteger(localBatch) || localBatch < 1) throw invalidValue('localBatch', localBatch, 'an integer >= 1');
    const globalBatch = localBatch * worldSize;
    this.globalBatches = (options.dropLast ?? true) ? Math.floor(length / globalBatch) : Math.ceil(length / globalBatch);
    if (this.globalBatches === 0) {
      throw invalidValue('--batch-size', globalBatch, `at most the training set size ${length}`);
    }
    this.length = this.globalBatches * localBatch;
  }

  /** This rank's [length] indices of `epoch`, batch after batch. */
  indices(epoch: number): Int32Array {
    const { length, seed, rank, worldSize, localBatch } = this.options;
    const permutation = epochPermutation(length, seed, epoch);
    const globalBatch = localBatch * worldSize;
    const out = new Int32Array(this.length);
    for (let b = 0; b < this.globalBatches; b++) {
      for (let i = 0; i < localBatch; i++) {
        out[b * localBatch + i] = permutation[(b * globalBatch + rank * localBatch + i) % length];
      }
    }
    return out;
  }
}

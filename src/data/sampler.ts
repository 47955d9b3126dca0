/** Samplers: the order in which a loader visits dataset indices in each epoch. */
import { invalidValue } from '../core/errors.js';
import { Rng } from '../core/random.js';

/**
 * The indices a loader visits in an epoch. `indices(epoch)` returns [length] global
 * dataset indices and must be a pure function of the epoch (and construction options), so
 * a resumed run sees the same order. A distributed sampler implements the same interface.
 */
export interface Sampler {
  /** Number of indices per epoch. */
  readonly length: number;
  /** [length] dataset indices of `epoch`. */
  indices(epoch: number): Int32Array;
}

function checkLength(length: number): void {
  if (!Number.isInteger(length) || length < 0) throw invalidValue('length', length, 'an integer >= 0');
}

/** 0, 1, ..., length-1 in every epoch. */
export class SequentialSampler implements Sampler {
  constructor(readonly length: number) {
    checkLength(length);
  }

  indices(_epoch: number): Int32Array {
    const out = new Int32Array(this.length);
    for (let i = 0; i < this.length; i++) out[i] = i;
    return out;
  }
}

/**
 * The permutation of 0..length-1 for `epoch`, drawn from `Rng.keyed(seed, epoch)`
 * (Fisher-Yates). Shared by {@link RandomSampler} and samplers that shard it.
 */
export function epochPermutation(length: number, seed: number, epoch: number): Int32Array {
  return Rng.keyed(seed, epoch).permutation(length);
}

/** A fresh random permutation of 0..length-1 per epoch, keyed by (seed, epoch). */
export class RandomSampler implements Sampler {
  constructor(
    readonly length: number,
    readonly seed: number,
  ) {
    checkLength(length);
    if (!Number.isInteger(seed)) throw invalidValue('seed', seed, 'an integer');
  }

  indices(epoch: number): Int32Array {
    return epochPermutation(this.length, this.seed, epoch);
  }
}

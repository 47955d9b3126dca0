/**
 * The collective operations ssl-zoo needs from a group of processes. Calls are blocking
 * (tfjs gradient functions are synchronous) and operate on Float32Array in place or
 * return new arrays. Every rank must issue the same collectives in the same order.
 *
 * Only `src/distributed` knows how a group is made; the rest of the code takes an
 * optional `ProcessGroup` and treats `undefined` (or world size 1) as one process. The
 * interface lives in `src/core` so that the trainer, the losses and `src/distributed` all
 * depend on it without depending on each other both ways.
 */
export interface ProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  /** Element-wise reduction over ranks, in place; every rank gets the result. */
  allReduce(data: Float32Array, op?: 'sum' | 'avg' | 'max'): void;
  /** Concatenation of every rank's equal-length `data`, ordered by rank. */
  allGather(data: Float32Array): Float32Array;
  /** Sum over ranks of `data` (length W·n), then this rank's slice `[rank·n, (rank+1)·n)`. */
  reduceScatter(data: Float32Array): Float32Array;
  /** Copies `root`'s `data` into every rank's `data`, in place. */
  broadcast(data: Float32Array, root?: number): void;
  /** Returns when every rank has called it. */
  barrier(): void;
  /** Releases the connections. */
  close(): void;
}

/** A group of one process: every collective is the identity. */
export class SingleProcessGroup implements ProcessGroup {
  readonly rank = 0;
  readonly worldSize = 1;
  allReduce(): void {}
  allGather(data: Float32Array): Float32Array {
    return data.slice();
  }
  reduceScatter(data: Float32Array): Float32Array {
    return data.slice();
  }
  broadcast(): void {}
  barrier(): void {}
  close(): void {}
}

/**
 * The group a batch-coupled loss runs over when it is not given one (PyTorch's default
 * process group, scoped). A method's training step sets it around its coupled loss
 * ({@link withProcessGroup}), so losses reach the trainer's group without any method
 * passing it by hand. Undefined outside such a scope.
 */
let scoped: ProcessGroup | undefined;

/**
 * Size of the job this process belongs to, recorded when a multi-process group is created
 * (see {@link recordJobSize}). A coupled loss that finds no group while this is above 1 is
 * a bug (it would silently use the local batch), and it says so.
 */
let jobSize = 1;

/** Runs `fn` (synchronous) with `group` as the scoped group of coupled losses. */
export function withProcessGroup<T>(group: ProcessGroup | undefined, fn: () => T): T {
  const outer = scoped;
  scoped = group;
  try {
    return fn();
  } finally {
    scoped = outer;
  }
}

/** The scoped group (see {@link withProcessGroup}), else undefined. */
export function scopedProcessGroup(): ProcessGroup | undefined {
  return scoped;
}

/** Records that this process is one of `worldSize` ranks (1 when its group closes). */
export function recordJobSize(worldSize: number): void {
  jobSize = worldSize;
}

/** How many ranks this process's job has (1 unless a multi-process group is open). */
export function jobWorldSize(): number {
  return jobSize;
}

/**
 * Shared plumbing of the worker processes spawned by the multi-process tests:
 * `node <worker>.js <spec.json> <rank>`. A worker prints its result as one JSON line on
 * stdout; on failure it prints `{"error": message, "elapsedMs": ...}` on stderr and exits 1.
 */
import { readFileSync } from 'node:fs';
import { createProcessGroup } from '../../../src/distributed/gloo.js';
import type { ProcessGroup } from '../../../src/core/process-group.js';

/** What every worker gets from the test. */
export interface BaseSpec {
  /** Fresh temp dir of this test (inputs, outputs). */
  dir: string;
  rendezvous: string;
  worldSize: number;
  timeoutMs: number;
  connectTimeoutMs?: number;
}

/** The spec file and the rank from argv. */
export function readArgs<T extends BaseSpec>(): { spec: T; rank: number } {
  const [specPath, rankText] = process.argv.slice(2);
  if (!specPath || rankText === undefined) throw new Error('usage: node worker.js <spec.json> <rank>');
  return { spec: JSON.parse(readFileSync(specPath, 'utf8')) as T, rank: Number(rankText) };
}

/** Joins the group described by the spec. */
export function joinGroup(spec: BaseSpec, rank: number): Promise<ProcessGroup> {
  return createProcessGroup({
    rank,
    worldSize: spec.worldSize,
    rendezvous: spec.rendezvous,
    timeoutMs: spec.timeoutMs,
    connectTimeoutMs: spec.connectTimeoutMs ?? 30_000,
  });
}

/** Clock start of the operation the failure tests time (set by the worker). */
export const clock = { start: Date.now() };

/**
 * Runs the worker body: prints its JSON result and exits once the output is written (a pipe
 * takes 64 KiB at once: exiting earlier cut a large result short), or the error and exits 1.
 */
export function run(body: () => Promise<unknown>): void {
  body().then(
    (result) => {
      process.stdout.write(`${JSON.stringify(result ?? null)}\n`, () => process.exit(0));
    },
    (err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      console.error(JSON.stringify({ error: message, name: (err as Error)?.name, elapsedMs: Date.now() - clock.start }));
      process.exit(1);
    },
  );
}

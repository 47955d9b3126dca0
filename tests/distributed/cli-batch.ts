/**
 * Test side of tests/distributed/workers/cli-batch.ts: runs a batch of `ssl-train` command lines
 * on W real ranks (one process per rank, each running every command line in order) and splits
 * each rank's output per command line. One launch instead of one per command line: starting a
 * rank (Node, tfjs, the native addons) costs more than a small verify run.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freshDir, runProcess, workerPath, type RankOutcome } from './helpers.js';
import type { CliBatchSpec } from './workers/cli-batch.js';

/** What one command line of a batch did: its exit code on every rank and the output of all ranks. */
export interface CliBatchResult {
  /** Exit code per rank (undefined: the rank never finished it, e.g. killed). */
  codes: Array<number | undefined>;
  /** Rank 0's stdout for this command line (verify's table, training's summary). */
  stdout: string;
  /** Every rank's stderr for this command line, rank 0 first. */
  stderr: string[];
}

/** The lines between `@@begin <id>` and `@@end <id> <code>` of `text`, per id, with the code. */
function segments(text: string): Map<string, { text: string; code?: number }> {
  const out = new Map<string, { text: string; code?: number }>();
  let current: { text: string; code?: number } | undefined;
  for (const line of text.split('\n')) {
    const begin = /^@@begin (\S+)$/.exec(line);
    const end = /^@@end (\S+) (-?\d+)$/.exec(line);
    if (begin) {
      current = { text: '' };
      out.set(begin[1]!, current);
    } else if (end && current) {
      current.code = Number(end[2]);
      current = undefined;
    } else if (current) current.text += `${line}\n`;
  }
  return out;
}

/**
 * Runs `entries` (id: `ssl-train` argv) on `worldSize` ranks sharing one launch (worldSize 1:
 * one process, no rank variables) and returns each entry's result by id. Every rank is killed
 * after `killAfterMs`; its unfinished entries then have no code. `env`: more environment for
 * every rank (the WebGPU engine's driver, tests/helpers/webgpu.ts).
 */
export async function runCliBatch(
  worldSize: number,
  entries: Record<string, string[]>,
  killAfterMs: number,
  env: NodeJS.ProcessEnv = {},
): Promise<Map<string, CliBatchResult>> {
  const dir = freshDir(`cli-batch-w${worldSize}`);
  try {
    const spec: CliBatchSpec = { dir, entries: Object.entries(entries).map(([id, argv]) => ({ id, argv })) };
    const specPath = join(dir, 'spec.json');
    writeFileSync(specPath, JSON.stringify(spec));
    const rankEnv = (rank: number) =>
      worldSize === 1 ? {} : { RANK: String(rank), WORLD_SIZE: String(worldSize), LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: String(worldSize) };
    const ranks: RankOutcome[] = await Promise.all(
      Array.from({ length: worldSize }, (_, rank) =>
        runProcess([workerPath('cli-batch'), specPath], { killAfterMs, rank, env: { FORCE_COLOR: '0', ...env, ...rankEnv(rank) } }),
      ),
    );
    const out = ranks.map((r) => segments(r.stdout));
    const err = ranks.map((r) => segments(r.stderr));
    const results = new Map<string, CliBatchResult>();
    for (const { id } of spec.entries) {
      results.set(id, {
        codes: out.map((o) => o.get(id)?.code),
        stdout: out[0]!.get(id)?.text ?? '',
        stderr: err.map(
          (e, rank) => e.get(id)?.text ?? `(rank ${rank}: no output for ${id}${ranks[rank]!.killed ? ', killed' : ''})\n${ranks[rank]!.stderr.slice(-2000)}`,
        ),
      });
    }
    return results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * One rank of a batch of `ssl-train` command lines that share one launch: the test spawns this
 * script once per rank (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE in the environment, as
 * the launcher sets them; none for a one-process batch), and every rank runs the same command
 * lines in order through the CLI's own `main`, each over its own rendezvous
 * (`file://<dir>/<id>`), so each is the `ssl-train` run a launcher's worker would make, without
 * starting W processes per run. Loads the negative-control methods of tests/methods and the
 * small test ViT `vit_micro` (tests/helpers/vit-micro.ts) first.
 *
 * argv: `<spec.json> ` with spec `{ dir, entries: [{ id, argv }] }`. Around each entry it writes
 * `@@begin <id>` and `@@end <id> <exit code>` lines to stdout and stderr.
 *
 * The ranks start each command line together, as a launcher's workers do: after a command line,
 * a rank waits until every rank has ended it ({@link endTogether}). Without that, a rank that
 * ends early (rank 1 of a verify run, while rank 0 still compares) waits alone at the next
 * rendezvous, whose connect timeout (the rows' `--timeout 60`) a loaded machine can exceed.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as backbones from '../../../src/backbones/index.js';
import { main } from '../../../src/cli/main.js';
import { RENDEZVOUS_ENV } from '../../../src/distributed/launcher.js';
import '../../methods/all4one-local-queue.js';
import '../../methods/dino-local-centre.js';
import '../../methods/regs-methods.js';
import '../../methods/swav-local-sinkhorn.js';
import '../../methods/tico-local.js';
import '../../methods/mmcr-local.js';
import '../../methods/simdino-local.js';
import '../../methods/lejepa-local.js';
import '../../methods/msn-local.js';
import '../../methods/vicregl-local.js';
import '../../methods/ibot-local-patch-centre.js';
import '../../methods/dinov2-local.js';
import '../../methods/simclr-local-slice-gather.js';
import { registerVitMicro } from '../../helpers/vit-micro.js';

/** What one batch runs. */
export interface CliBatchSpec {
  dir: string;
  entries: Array<{ id: string; argv: string[] }>;
}

registerVitMicro(backbones);

const rank = Number(process.env.RANK ?? 0);
const worldSize = Number(process.env.WORLD_SIZE ?? 1);

/** Marks command line `id` ended on this rank and waits until every rank has marked it. */
async function endTogether(dir: string, id: string): Promise<void> {
  const marker = (r: number) => join(dir, `ended-${id}-${r}`);
  writeFileSync(marker(rank), '');
  while (!Array.from({ length: worldSize }, (_, r) => marker(r)).every((path) => existsSync(path))) await new Promise((resolve) => setTimeout(resolve, 50));
}

const spec = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as CliBatchSpec;
for (const { id, argv } of spec.entries) {
  process.env[RENDEZVOUS_ENV] = pathToFileURL(join(spec.dir, `rendezvous-${id}`)).href;
  process.stdout.write(`@@begin ${id}\n`);
  process.stderr.write(`@@begin ${id}\n`);
  process.exitCode = undefined;
  const code = await main(argv);
  process.exitCode = undefined;
  process.stdout.write(`@@end ${id} ${code}\n`);
  process.stderr.write(`@@end ${id} ${code}\n`);
  await endTogether(spec.dir, id);
}

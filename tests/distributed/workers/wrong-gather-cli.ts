/**
 * `ssl-train` with one extra method, `simclr_local_slice_gather` (tests/methods/simclr-local-slice-gather.ts).
 * Run as the CLI: `node wrong-gather-cli.js verify --method simclr_local_slice_gather --devices 2 ...`
 * (the launcher re-runs this script for every rank).
 */
import { main } from '../../../src/cli/main.js';
import '../../methods/simclr-local-slice-gather.js';

process.exitCode = await main(process.argv.slice(2));

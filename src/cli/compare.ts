import { UserError } from '../core/errors.js';
import { writeComparisonReport, type ComparisonReport } from '../report/report.js';

/** Options of `ssl-train compare` as commander parses them. */
export interface CompareCliOptions {
  out?: string;
  /** Number, or the raw text when it is not one (validated here). */
  points?: number | string;
  /** `--no-embeddings` sets false. */
  embeddings?: boolean;
  title?: string;
}

/**
 * `ssl-train compare RUN_DIR... --out DIR`: checks the options (user errors naming the
 * option), writes the report and prints where it is. Progress goes to stderr.
 */
export async function runCompare(runDirs: string[], options: CompareCliOptions): Promise<ComparisonReport> {
  if (!options.out) throw new UserError('--out: required (the directory for report.html and the PNG charts)');
  const points = options.points ?? 1000;
  if (typeof points !== 'number' || !Number.isInteger(points) || points < 10) {
    throw new UserError(`--points: ${JSON.stringify(points)} is not allowed; expected an integer >= 10`);
  }
  const report = await writeComparisonReport(runDirs, {
    out: options.out,
    points,
    embeddings: options.embeddings !== false,
    title: options.title,
    log: (line) => process.stderr.write(`ssl-train compare: ${line}\n`),
  });
  process.stdout.write(`${report.html}\n${report.pngs.join('\n')}\n`);
  return report;
}

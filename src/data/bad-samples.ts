/**
 * `--max-bad-samples`: how many training files may turn out unreadable during a run
 * (deleted, truncated, permissions) before it stops. Each is skipped with a warning and a
 * count until then; its batch slot shows the next readable file (see pixels.ts).
 */
import { invalidValue } from '../core/errors.js';

/** An absolute count, or a percentage of the training set. */
export type BadSamplesLimit = { count: number } | { percent: number };

const ALLOWED = 'an integer >= 0 (unreadable files) or a percentage of the training set such as 1% or 0.5%';

/** Parses `--max-bad-samples` (`25`, `2%`, or a YAML number); a user error otherwise. */
export function parseBadSamplesLimit(value: unknown): BadSamplesLimit {
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0) return { count: value };
  if (typeof value === 'string') {
    const text = value.trim();
    if (/^\d+$/.test(text)) return { count: Number(text) };
    const percent = /^(\d+(?:\.\d+)?)%$/.exec(text);
    if (percent && Number(percent[1]) <= 100) return { percent: Number(percent[1]) };
  }
  throw invalidValue('--max-bad-samples', value, ALLOWED);
}

/**
 * The number of unreadable files a run over `trainSize` images tolerates: the count, or the
 * percentage of `trainSize` rounded up (so `1%` of a small set still tolerates one).
 */
export function badSamplesAllowed(limit: BadSamplesLimit, trainSize: number): number {
  return 'count' in limit ? limit.count : Math.ceil((limit.percent / 100) * trainSize);
}

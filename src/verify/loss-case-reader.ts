/** Field-naming validation of case files (./loss-case-format.ts, ./loss-case-v1.ts). */
import { UserError } from '../core/errors.js';

type Json = unknown;

/** Field-naming validation helpers: every failure is a `UserError` `loss case SOURCE: FIELD: PROBLEM`. */
export class CaseReader {
  constructor(readonly source: string) {}

  fail(field: string, problem: string): never {
    throw new UserError(`loss case ${this.source}: ${field}: ${problem}`);
  }

  describe(v: Json): string {
    if (v === undefined) return 'nothing (missing)';
    if (Array.isArray(v)) return `an array of ${v.length}`;
    if (v === null) return 'null';
    if (typeof v === 'object') return 'an object';
    const text = typeof v === 'number' ? String(v) : JSON.stringify(v);
    return `${typeof v} ${text.length > 40 ? text.slice(0, 40) + '…' : text}`;
  }

  object(v: Json, field: string): Record<string, Json> {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) this.fail(field, `expected an object, got ${this.describe(v)}`);
    return v as Record<string, Json>;
  }

  number(v: Json, field: string): number {
    if (typeof v !== 'number' || !Number.isFinite(v)) this.fail(field, `expected a finite number, got ${this.describe(v)}`);
    return v;
  }

  positiveInt(v: Json, field: string): number {
    const n = this.number(v, field);
    if (!Number.isInteger(n) || n < 1) this.fail(field, `expected a positive integer, got ${n}`);
    return n;
  }

  string(v: Json, field: string): string {
    if (typeof v !== 'string') this.fail(field, `expected a string, got ${this.describe(v)}`);
    return v;
  }

  numbers(v: Json, field: string, length: number, what: string): number[] {
    if (!Array.isArray(v)) this.fail(field, `expected an array of ${length} numbers (${what}), got ${this.describe(v)}`);
    if (v.length !== length) this.fail(field, `expected ${length} numbers (${what}), got ${v.length}`);
    return v.map((x, i) => this.number(x, `${field}[${i}]`));
  }

  /** A row-major `[n][d]` array of arrays. */
  matrix(v: Json, field: string, n: number, d: number): number[][] {
    if (!Array.isArray(v)) this.fail(field, `expected an [N][D] = [${n}][${d}] array, got ${this.describe(v)}`);
    if (v.length !== n) this.fail(field, `expected N = ${n} rows, got ${v.length}`);
    return v.map((row, i) => this.numbers(row, `${field}[${i}]`, d, 'D'));
  }
}

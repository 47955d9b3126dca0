/**
 * A mistake of the user's (bad flag, config value, data file, environment). The CLI prints
 * its message on one line, without a stack trace, and exits with code 2.
 */
export class UserError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UserError';
  }
}

/** Formats the usual "field: value is not allowed; allowed: ..." message. */
export function invalidValue(field: string, value: unknown, allowed: string): UserError {
  return new UserError(`${field}: ${JSON.stringify(value)} is not allowed; expected ${allowed}`);
}

/**
 * A run that cannot go on although the input was fine (e.g. training diverged to NaN).
 * The CLI prints its message on one line, without a stack trace, and exits with code 1.
 */
export class TrainingFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TrainingFailure';
  }
}

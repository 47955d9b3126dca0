/** Parsers of flag text shared by the commands: a value they cannot read stays text, which the config validation then names. */

/** A number when the text is one; otherwise the text. */
export function numberOrText(value: string): number | string {
  const n = Number(value);
  return value.trim() !== '' && Number.isFinite(n) ? n : value;
}

/** true / false (also 1/0, yes/no, on/off, any case) when the text is one; otherwise the text. */
export function booleanOrText(value: string): boolean | string {
  if (/^(true|1|yes|on)$/i.test(value)) return true;
  if (/^(false|0|no|off)$/i.test(value)) return false;
  return value;
}

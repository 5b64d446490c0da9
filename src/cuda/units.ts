// Byte counts as people read them in error messages and `vpps info` (binary units, one decimal).

const UNITS = ["KiB", "MiB", "GiB", "TiB"] as const;

/** `512 B`, `12.0 MiB`, `1.0 GiB`. */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return `${bytes} B`;
  const sign = bytes < 0 ? "-" : "";
  let value = Math.abs(bytes);
  if (value < 1024) return `${sign}${value} B`;
  let unit = -1;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${sign}${value.toFixed(1)} ${UNITS[unit]}`;
}

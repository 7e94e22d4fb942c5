/**
 * Bytes-over-time samples for one pull, enough to answer "how many bytes/s over the last W ms".
 * Pure; bounded: samples closer than `minSpacingMs` replace each other, and samples older than the
 * window (except the newest such one, the baseline) are dropped.
 */
export class RateWindow {
  private samples: Array<{ t: number; bytes: number }> = [];

  constructor(private readonly windowMs: number, private readonly minSpacingMs = 250) {}

  /** Forget history: the window starts again at (t, bytes) (after a stall, speed is measured afresh). */
  reset(t: number, bytes: number): void {
    this.samples = [{ t, bytes }];
  }

  add(t: number, bytes: number): void {
    const last = this.samples[this.samples.length - 1];
    if (last && t - last.t < this.minSpacingMs) {
      last.bytes = bytes;
      if (this.samples.length > 1) return;
    } else {
      this.samples.push({ t, bytes });
    }
    // keep one sample at or before (t - window) as the baseline
    const cutoff = t - this.windowMs;
    let firstKeep = 0;
    while (firstKeep + 1 < this.samples.length && (this.samples[firstKeep + 1] as { t: number }).t <= cutoff) firstKeep++;
    if (firstKeep > 0) this.samples.splice(0, firstKeep);
  }

  /**
   * Bytes/s over the window ending at `now`. `covered` is false when the samples do not reach back a
   * whole window yet (too early to call a pull slow).
   */
  rate(now: number, currentBytes: number): { bytesPerSecond: number; covered: boolean } {
    const first = this.samples[0];
    if (!first) return { bytesPerSecond: 0, covered: false };
    const from = now - this.windowMs;
    // baseline: the newest sample at or before `from`, else the oldest one we have
    let base = first;
    for (const s of this.samples) {
      if (s.t <= from) base = s; else break;
    }
    const covered = base.t <= from;
    const span = Math.max(now - base.t, 1);
    const bytes = Math.max(currentBytes - base.bytes, 0);
    return { bytesPerSecond: (bytes * 1000) / span, covered };
  }
}

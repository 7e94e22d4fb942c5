/**
 * Token bucket (client-go's flowcontrol semantics: `qps` tokens per second, at most `burst` saved).
 * Pure apart from the injected clock.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!(qps > 0) || !(burst >= 1)) throw new Error(`TokenBucket: qps must be > 0 and burst ≥ 1 (got ${qps}, ${burst})`);
    this.tokens = burst;
    this.last = now();
  }

  private refill(): void {
    const t = this.now();
    if (t > this.last) {
      this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.qps);
      this.last = t;
    }
  }

  /** Takes a token if one is there and returns 0; otherwise returns the ms until one will be. */
  tryTake(): number {
    this.refill();
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil(((1 - this.tokens) / this.qps) * 1000));
  }
}

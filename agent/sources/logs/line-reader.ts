/**
 * Splits a byte stream into text lines without ever holding more than `maxLineBytes` of one line:
 * a longer line is dropped (reported once through `onTooLong`, when it crosses the cap) and its
 * remaining bytes are skipped up to the next newline, so a 5 MB line costs no more memory than the
 * cap. Bytes are decoded as UTF-8 (binary junk becomes U+FFFD, never an exception); a trailing
 * `\r` is removed. Shared by the file and journal followers.
 */
export const DEFAULT_MAX_LINE_BYTES = 64 * 1024;

export class LineSplitter {
  private parts: Buffer[] = [];
  private partBytes = 0;
  private discarding = false;
  private droppedBytes = 0;

  constructor(
    private readonly maxLineBytes: number = DEFAULT_MAX_LINE_BYTES,
    private readonly onTooLong: (bytesSoFar: number) => void = () => {},
  ) {
    if (!Number.isInteger(maxLineBytes) || maxLineBytes < 1) throw new RangeError(`maxLineBytes must be a positive integer, got ${maxLineBytes}`);
  }

  /** Bytes of the unfinished line currently held (≤ maxLineBytes). */
  get pendingBytes(): number {
    return this.partBytes;
  }

  /** Feeds bytes; calls onLine for every complete line. The chunk may be reused by the caller afterwards. */
  push(chunk: Buffer, onLine: (line: string) => void): void {
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(0x0a, start);
      const end = nl < 0 ? chunk.length : nl;
      const len = end - start;
      if (this.discarding) {
        this.droppedBytes += len;
      } else if (this.partBytes + len > this.maxLineBytes) {
        this.startDiscarding(len);
      } else if (nl >= 0) {
        const seg = chunk.subarray(start, end);
        const whole = this.parts.length === 0 ? seg : Buffer.concat([...this.parts, seg], this.partBytes + len);
        this.parts = [];
        this.partBytes = 0;
        onLine(decode(whole));
      } else if (len > 0) {
        this.parts.push(Buffer.from(chunk.subarray(start, end))); // copy: the caller reuses its buffer
        this.partBytes += len;
      }
      if (nl < 0) break;
      if (this.discarding) { this.discarding = false; this.droppedBytes = 0; }
      start = nl + 1;
    }
  }

  /** Emits the unfinished last line, if any (end of a rotated file, a truncation, end of stream). */
  flush(onLine: (line: string) => void): void {
    if (this.discarding) { this.discarding = false; this.droppedBytes = 0; return; }
    if (this.partBytes === 0) return;
    const whole = Buffer.concat(this.parts, this.partBytes);
    this.parts = [];
    this.partBytes = 0;
    onLine(decode(whole));
  }

  /** Forgets the unfinished line. */
  reset(): void {
    this.parts = [];
    this.partBytes = 0;
    this.discarding = false;
    this.droppedBytes = 0;
  }

  private startDiscarding(len: number): void {
    this.droppedBytes = this.partBytes + len;
    this.parts = [];
    this.partBytes = 0;
    this.discarding = true;
    this.onTooLong(this.droppedBytes);
  }
}

function decode(buf: Buffer): string {
  let end = buf.length;
  if (end > 0 && buf[end - 1] === 0x0d) end--;
  return buf.toString('utf8', 0, end);
}

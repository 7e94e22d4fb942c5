/**
 * Fills in what one log line cannot say alone. CRI-O's progress-timeout line names no image, and
 * its `Pulled image:` line names the resolved digest reference rather than the one requested; both
 * carry the request id of their `Pulling image:` line. Bounded memory (oldest requests forgotten).
 */
import type { ParsedLogLine } from './parse/types.js';

const MAX_REQUESTS = 1024;

export class LogCorrelator {
  private readonly crioRequests = new Map<string, string>();

  /** Returns the line with its image attributed, or null when it cannot be attributed. */
  apply(p: ParsedLogLine): ParsedLogLine | null {
    if (p.component !== 'cri-o') return p;
    const ev = p.event;
    const id = p.requestId;
    if (ev.type === 'pull-started') {
      if (id) {
        this.crioRequests.delete(id);
        this.crioRequests.set(id, ev.image);
        if (this.crioRequests.size > MAX_REQUESTS) {
          const oldest = this.crioRequests.keys().next().value;
          if (oldest !== undefined) this.crioRequests.delete(oldest);
        }
      }
      return p;
    }
    const requested = id ? this.crioRequests.get(id) : undefined;
    if (ev.type === 'pull-succeeded') {
      if (id) this.crioRequests.delete(id);
      if (requested && requested !== ev.image) {
        return { ...p, event: { ...ev, image: requested, repoDigest: ev.repoDigest ?? ev.image } };
      }
      return p;
    }
    if (ev.type === 'pull-cancelled' && ev.image === '') {
      let image = requested;
      if (image === undefined && this.crioRequests.size === 1) image = this.crioRequests.values().next().value;
      if (id) this.crioRequests.delete(id);
      return image ? { ...p, event: { ...ev, image } } : null;
    }
    return p;
  }
}

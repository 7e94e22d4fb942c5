import type { LogComponent, PullLogEvent } from '../../../model/observations.js';

export type { LogComponent, PullLogEvent };

export interface ParseContext {
  /** Used when the line carries no time of its own (epoch ms). */
  fallbackAt: number;
  /** Known component (a journal unit, a file the user labelled); absent = detect per line. */
  component?: LogComponent;
  /** Year for year-less stamps (klog, syslog); default: the year of fallbackAt. */
  year?: number;
}

export interface ParsedLogLine {
  at: number;
  component: LogComponent;
  event: PullLogEvent;
  /**
   * The runtime's request id when the line has one (CRI-O `id=…`). CRI-O's progress-timeout line
   * does not name the image: its event has `image: ''` and this id; `LogCorrelator` fills the image
   * in from the `Pulling image:` line of the same request. Every other event names its image.
   */
  requestId?: string;
}

/** What a component's message matcher found: an event, or nothing. */
export type MessageMatch = PullLogEvent | null;

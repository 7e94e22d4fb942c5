import type { Transition } from '../model/pulls.js';

/** A sink only delivers: it gets every state transition of every pull, in order. */
export interface Sink {
  readonly name: string;
  handle(transition: Transition): void;
  close?(): Promise<void>;
}

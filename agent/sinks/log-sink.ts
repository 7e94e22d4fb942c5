import type { Logger } from '../../common/log.js';
import type { Transition } from '../model/pulls.js';
import type { Sink } from './sink.js';

/** One structured pino line per state transition. */
export function createLogSink(logger: Logger): Sink {
  return {
    name: 'log',
    handle(t: Transition): void {
      if (t.from === t.to) return; // re-announced for newly waiting pods: nothing new to log
      const p = t.pull;
      const fields = {
        transition: t.kind, from: t.from, to: t.to, image: p.image, registry: p.registry, pullId: p.id,
        bytesDone: p.bytesDone, bytesTotal: p.bytesTotal, idleSeconds: p.idleSeconds, rate: p.rateBytesPerSecond,
        layers: p.layers.filter((l) => l.state !== 'committed').map((l) => ({ digest: l.digest, state: l.state, bytesDone: l.bytesDone, bytesTotal: l.bytesTotal })),
        pods: p.pods.map((x) => `${x.namespace}/${x.name}`), runtime: p.runtime, cancel: p.cancel, error: p.error,
      };
      const level = t.kind === 'stalled' || t.kind === 'cancelled' || t.kind === 'failed' ? 'warn' : t.kind === 'slow' ? 'warn' : 'info';
      logger[level](fields, `pull ${t.kind}: ${p.image}`);
    },
  };
}

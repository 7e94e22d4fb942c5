/**
 * gRPC status checks without loading @grpc/grpc-js (it costs ~17 MiB RSS; the ingest source only
 * loads it when a containerd socket is configured). Codes: grpc/doc/statuscodes.md.
 */
const CANCELLED = 1;
const DEADLINE_EXCEEDED = 4;
const NOT_FOUND = 5;
const UNAVAILABLE = 14;

/** The call failed because containerd is not reachable, not because the request was wrong. */
export function isUnavailable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === UNAVAILABLE || code === DEADLINE_EXCEEDED || code === CANCELLED;
}

export function isNotFound(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === NOT_FOUND;
}

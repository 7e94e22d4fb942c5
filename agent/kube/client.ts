/**
 * Where the agent's API credentials come from (the in-cluster service account for the DaemonSet, or
 * a kubeconfig file for tests and running by hand) and the error helpers pod-watch and events-sink
 * share. The client itself is ./api-client.ts.
 */
import { KubeClient, type KubeClientOptions, type KubeConfigInput, type LoadKubeConfigOptions } from './api-client.js';

export { KubeConfigError, loadKubeConfig, type KubeConfigInput } from './api-client.js';

/** A client for the input; throws KubeConfigError when the configuration is missing or malformed. */
export function makeKubeClient(input: KubeConfigInput, opts: KubeClientOptions & LoadKubeConfigOptions = {}): KubeClient {
  return KubeClient.fromInput(input, opts);
}

/** HTTP status of an error from the API client (undefined for network errors). */
export function httpStatusOf(err: unknown): number | undefined {
  if (err && typeof err === 'object') {
    const e = err as { code?: unknown; statusCode?: unknown };
    if (typeof e.code === 'number' && e.code >= 100 && e.code < 600) return e.code;
    if (typeof e.statusCode === 'number') return e.statusCode;
  }
  return undefined;
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
  }
  return String(err);
}

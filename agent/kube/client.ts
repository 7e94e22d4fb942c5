/**
 * Where the agent's API credentials come from: the in-cluster service account (the DaemonSet), or a
 * kubeconfig file (tests, running the agent by hand against a cluster).
 */
import { KubeConfig, Observable, type ConfigurationOptions, type RequestContext, type ResponseContext } from '@kubernetes/client-node';

/**
 * `undefined` or "in-cluster": the pod's service account (KUBERNETES_SERVICE_HOST/PORT and the token
 * under /var/run/secrets/kubernetes.io/serviceaccount). A string: path of a kubeconfig file.
 * A KubeConfig: used as is.
 */
export type KubeConfigInput = string | KubeConfig | undefined;

export class KubeConfigError extends Error {}

export function loadKubeConfig(input: KubeConfigInput): KubeConfig {
  if (input instanceof KubeConfig) return input;
  const kc = new KubeConfig();
  if (input === undefined || input === 'in-cluster') {
    if (!process.env.KUBERNETES_SERVICE_HOST) {
      throw new KubeConfigError('not running in a cluster (KUBERNETES_SERVICE_HOST unset); pass a kubeconfig path or --kube off');
    }
    kc.loadFromCluster();
  } else {
    try {
      kc.loadFromFile(input);
    } catch (err) {
      throw new KubeConfigError(`cannot load kubeconfig ${input}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  if (!kc.getCurrentCluster()) throw new KubeConfigError('kubeconfig has no current cluster');
  return kc;
}

/** HTTP status of an error from the generated API client or from Watch (undefined for network errors). */
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

/**
 * Per-request options for the generated API clients: a hard timeout (the generated clients have
 * none, and a black-holed API server must not hang the agent) and extra headers (the Content-Type of
 * a merge patch).
 */
export function requestOptions(opts: { timeoutMs: number; headers?: Record<string, string> }): ConfigurationOptions {
  return {
    middleware: [{
      pre: (ctx: RequestContext) => {
        ctx.setSignal(AbortSignal.timeout(opts.timeoutMs));
        for (const [k, v] of Object.entries(opts.headers ?? {})) ctx.setHeaderParam(k, v);
        return new Observable(Promise.resolve(ctx));
      },
      post: (rsp: ResponseContext) => new Observable(Promise.resolve(rsp)),
    }],
    middlewareMergeStrategy: 'append',
  };
}

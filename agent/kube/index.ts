/**
 * The agent's Kubernetes integration (wired by agent/run.ts when --kube is not "off"):
 *   const pods = new PodWatchSource({ nodeName, kubeConfig });          // a Source
 *   const events = createKubeEventsSink({ nodeName, kubeConfig, logger,  // a Sink
 *     podLookup: (ns, name) => pods.lookup(ns, name) });
 */
export { PodWatchSource, type PodWatchOptions, type PodWatchStats } from './pod-watch.js';
export { KubeEventsSink, createKubeEventsSink, eventName, type KubeEventsSinkOptions, type KubeEventsSinkStats } from './events-sink.js';
export { eventForTransition, REPORTING_CONTROLLER, type PullEventReason, type PullEventSpec } from './event-message.js';
export { parsePod, waitingContainers, podsQueuedBehind, podsWaitingOn, IMAGE_WAIT_REASONS } from './pods.js';
export { parseNode, parseRuntimeVersion, type NodeInfo } from './node-info.js';
export { loadKubeConfig, KubeConfigError, type KubeConfigInput } from './client.js';
export { KubeClient, KubeApiError, parseKubeConfig, type ResolvedKubeConfig } from './api-client.js';

/** Everything the harness offers, for `import { … } from '../../harness/index.js'`. */
export * from './containerd.js';
export * from './cri.js';
export * from './dockerd.js';
export * from './images.js';
export * from './processes.js';
export * from './registry.js';
export * from './stall-proxy.js';
export * from './wait.js';

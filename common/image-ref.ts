/**
 * Image references as kubelet, containerd and Docker normalise them
 * (github.com/distribution/reference: docker.io default domain, "library/" for official images,
 * "latest" default tag). Pure; never throws.
 */
export interface ImageRef {
  /** What the caller gave, trimmed. */
  original: string;
  /** registry host, e.g. "docker.io", "localhost:5000", "123.dkr.ecr.us-east-1.amazonaws.com". */
  registry: string;
  /** repository path without host, e.g. "library/nginx". */
  repository: string;
  tag?: string;
  digest?: string;
  /** Fully qualified, e.g. "docker.io/library/nginx:latest" or "host/repo@sha256:…". */
  normalized: string;
}

const DEFAULT_DOMAIN = 'docker.io';

export function parseImageRef(input: string): ImageRef {
  const original = String(input ?? '').trim();
  let rest = original;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) { digest = rest.slice(at + 1); rest = rest.slice(0, at); }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > lastSlash) { tag = rest.slice(colon + 1); rest = rest.slice(0, colon); }
  let registry = DEFAULT_DOMAIN;
  let repository = rest;
  const firstSlash = rest.indexOf('/');
  if (firstSlash >= 0) {
    const first = rest.slice(0, firstSlash);
    if (first.includes('.') || first.includes(':') || first === 'localhost' || first !== first.toLowerCase()) {
      registry = first;
      repository = rest.slice(firstSlash + 1);
    }
  }
  if (registry === 'index.docker.io') registry = DEFAULT_DOMAIN;
  if (registry === DEFAULT_DOMAIN && !repository.includes('/')) repository = `library/${repository}`;
  if (!tag && !digest) tag = 'latest';
  const normalized = `${registry}/${repository}${tag ? `:${tag}` : ''}${digest ? `@${digest}` : ''}`;
  return { original, registry, repository, tag, digest, normalized };
}

/** True when two references name the same repository (tags and digests ignored). */
export function sameRepository(a: string, b: string): boolean {
  const x = parseImageRef(a);
  const y = parseImageRef(b);
  return x.registry === y.registry && x.repository === y.repository;
}

/**
 * Registry hosts as equal as the evidence allows: containerd's distribution-source label drops the
 * port ("127.0.0.1:5000" is labelled "127.0.0.1"), so a side without a port matches any port.
 */
export function sameRegistry(a: string, b: string): boolean {
  if (a === b) return true;
  const strip = (h: string) => h.replace(/:\d+$/, '');
  const aPort = /:\d+$/.test(a);
  const bPort = /:\d+$/.test(b);
  if (aPort && bPort) return false;
  return strip(a) === strip(b);
}

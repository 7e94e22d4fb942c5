/**
 * Builds every kustomization under manifests/ with the real `kubectl kustomize` (or Debian's
 * `kustomize build` where kubectl is absent) and validates every
 * object it renders:
 *  - against the Kubernetes v1.36 OpenAPI schemas compiled into kubernetes-models 5.x (types,
 *    required fields, enums, formats); ServiceMonitor against the prometheus-operator CRD schema
 *    shipped in @kubernetes-models/prometheus-operator;
 *  - strictly: no field the API does not know (what `kubectl apply --validate=strict` rejects),
 *    using the field maps of @kubernetes/client-node's generated models;
 *  - against what a cluster admin reviewing a privileged DaemonSet insists on (RBAC, mounts, …).
 */
import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import * as k8s from '@kubernetes/client-node';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const KUBECTL = process.env.PULLWATCH_KUBECTL ?? '/usr/bin/kubectl';
/** Debian's kustomize package: the same kustomize that kubectl embeds, for machines without kubectl. */
const KUSTOMIZE = process.env.PULLWATCH_KUSTOMIZE ?? '/usr/bin/kustomize';
const KUSTOMIZATIONS = ['base', 'overlays/postgres', 'overlays/tune', 'overlays/servicemonitor'];
type Json = Record<string, unknown>;

function build(dir: string): Json[] {
  const target = join(ROOT, 'manifests', dir);
  let out: string;
  if (existsSync(KUBECTL)) out = execFileSync(KUBECTL, ['kustomize', target], { encoding: 'utf8', timeout: 60_000 });
  else if (existsSync(KUSTOMIZE)) out = execFileSync(KUSTOMIZE, ['build', target], { encoding: 'utf8', timeout: 60_000 });
  else throw new Error(`neither kubectl (${KUBECTL}) nor kustomize (${KUSTOMIZE}; Debian package kustomize) found: cannot build the kustomizations`);
  return parseAllDocuments(out).map((d) => d.toJSON() as Json).filter((o) => o && typeof o === 'object');
}

interface Validatable { validate(): void }
type ModelClass = new (data: Json) => Validatable;

/** kubernetes-models module for an apiVersion: "v1" → kubernetes-models/v1, "apps/v1" → …/apps/v1. */
async function modelFor(apiVersion: string, kind: string): Promise<ModelClass> {
  const mod = apiVersion === 'monitoring.coreos.com/v1'
    ? await import('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1') as Record<string, unknown>
    : await import(`kubernetes-models/${apiVersion}`) as Record<string, unknown>;
  const cls = mod[kind];
  if (typeof cls !== 'function') throw new Error(`no schema for ${apiVersion} ${kind}`);
  return cls as ModelClass;
}

/** Field maps of the client's generated models (V1DaemonSet, V1Container, …). */
type AttrMap = Array<{ baseName: string; type: string }>;
function attrs(type: string): AttrMap | undefined {
  const cls = (k8s as unknown as Record<string, { getAttributeTypeMap?: () => AttrMap }>)[type];
  return cls?.getAttributeTypeMap?.();
}

function unknownFields(value: unknown, type: string, path: string, out: string[]): void {
  if (value === null || value === undefined) return;
  const arr = /^Array<(.+)>$/.exec(type);
  if (arr) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, arr[1] as string, `${path}[${i}]`, out));
    return;
  }
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (map) {
    if (typeof value === 'object') for (const [k, v] of Object.entries(value as Json)) unknownFields(v, map[1] as string, `${path}.${k}`, out);
    return;
  }
  const fields = attrs(type);
  if (!fields || typeof value !== 'object' || Array.isArray(value)) return;
  const byName = new Map(fields.map((f) => [f.baseName, f.type]));
  for (const [k, v] of Object.entries(value as Json)) {
    const t = byName.get(k);
    if (t === undefined) out.push(`${path}.${k}`);
    else unknownFields(v, t, `${path}.${k}`, out);
  }
}

function clientTypeName(apiVersion: string, kind: string): string {
  const version = apiVersion.split('/').pop() as string;
  return `${version.charAt(0).toUpperCase()}${version.slice(1)}${kind}`;
}

function find(objs: Json[], kind: string, name: string): Json {
  const o = objs.find((x) => x.kind === kind && (x.metadata as Json).name === name);
  if (!o) throw new Error(`${kind}/${name} not rendered`);
  return o;
}

function podSpec(o: Json): Json {
  return ((o.spec as Json).template as Json).spec as Json;
}

function container(o: Json, name: string): Json {
  const c = (podSpec(o).containers as Json[]).find((x) => x.name === name);
  if (!c) throw new Error(`container ${name} missing`);
  return c;
}

describe('manifests (kubectl kustomize + Kubernetes v1.36 schemas)', () => {
  for (const dir of KUSTOMIZATIONS) {
    it(`${dir}: every object validates against its schema and has no unknown field`, async () => {
      const objs = build(dir);
      expect(objs.length).toBeGreaterThan(5);
      const problems: string[] = [];
      for (const o of objs) {
        const id = `${String(o.kind)}/${String((o.metadata as Json | undefined)?.name)}`;
        try {
          const Model = await modelFor(String(o.apiVersion), String(o.kind));
          new Model(o).validate();
        } catch (err) {
          problems.push(`${id}: ${err instanceof Error ? err.message : String(err)}`);
        }
        if (o.apiVersion !== 'monitoring.coreos.com/v1') {
          const type = clientTypeName(String(o.apiVersion), String(o.kind));
          if (!attrs(type)) problems.push(`${id}: no client model ${type} for the strict check`);
          const unknown: string[] = [];
          unknownFields(o, type, id, unknown);
          problems.push(...unknown.map((u) => `unknown field ${u}`));
        }
        if (o.kind !== 'Namespace' && !o.kind?.toString().startsWith('Cluster')) {
          if ((o.metadata as Json).namespace !== 'pullwatch') problems.push(`${id}: not in namespace pullwatch`);
        }
      }
      expect(problems).toEqual([]);
    });
  }

  it('the schema check is real: a broken object is rejected, an unknown field is found', async () => {
    const objs = build('base');
    const ds = structuredClone(find(objs, 'DaemonSet', 'pullwatch-agent'));
    (container(ds, 'agent') as Json).imagePullPolicy = 'Sometimes';
    const Model = await modelFor('apps/v1', 'DaemonSet');
    expect(() => new Model(ds).validate()).toThrow(/imagePullPolicy/);
    (container(ds, 'agent') as Json).privilegd = true;
    const unknown: string[] = [];
    unknownFields(ds, 'V1DaemonSet', 'ds', unknown);
    expect(unknown).toEqual(['ds.spec.template.spec.containers[0].privilegd']);
  });

  it('base: least-privilege RBAC, and the collector gets none', () => {
    const objs = build('base');
    const role = find(objs, 'ClusterRole', 'pullwatch-agent');
    expect(role.rules).toEqual([
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['nodes'], verbs: ['get'] },
      { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
    ]);
    expect(objs.filter((o) => /Role/.test(String(o.kind))).map((o) => `${String(o.kind)}/${String((o.metadata as Json).name)}`).sort())
      .toEqual(['ClusterRole/pullwatch-agent', 'ClusterRoleBinding/pullwatch-agent']);
    const binding = find(objs, 'ClusterRoleBinding', 'pullwatch-agent');
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'pullwatch-agent', namespace: 'pullwatch' }]);
    expect(find(objs, 'ServiceAccount', 'pullwatch-collector').automountServiceAccountToken).toBe(false);
    const ns = find(objs, 'Namespace', 'pullwatch');
    expect((ns.metadata as Json).labels).toMatchObject({ 'pod-security.kubernetes.io/enforce': 'privileged' });
  });

  it('base: the agent DaemonSet as a reviewer expects it', () => {
    const objs = build('base');
    const ds = find(objs, 'DaemonSet', 'pullwatch-agent');
    const spec = podSpec(ds);
    expect(spec).toMatchObject({ hostPID: true, priorityClassName: 'system-node-critical', serviceAccountName: 'pullwatch-agent', tolerations: [{ operator: 'Exists' }] });
    expect(spec.hostNetwork).toBeUndefined();
    expect((ds.spec as Json).updateStrategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: '10%' } });
    const c = container(ds, 'agent');
    expect(c.securityContext).toMatchObject({ privileged: true, runAsUser: 0, readOnlyRootFilesystem: true });
    expect(c.resources).toEqual({ requests: { cpu: '50m', memory: '96Mi' }, limits: { cpu: '200m', memory: '192Mi' } });
    expect(c.env).toContainEqual({ name: 'NODE_OPTIONS', value: '--max-semi-space-size=1' });
    expect((c.livenessProbe as Json).httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    expect((c.readinessProbe as Json).httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    const env = c.env as Json[];
    expect(env.find((e) => e.name === 'PULLWATCH_NODE_NAME')).toEqual({ name: 'PULLWATCH_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } });
    expect(c.image).toBe('pullwatch/pullwatch:0.1.0');
    // Every hostPath is mounted read-only except the agent's own queue.
    const volumes = new Map((spec.volumes as Json[]).map((v) => [v.name as string, v]));
    const hostMounts = (c.volumeMounts as Json[]).filter((m) => (volumes.get(m.name as string) as Json | undefined)?.hostPath);
    const writable = hostMounts.filter((m) => m.readOnly !== true).map((m) => ((volumes.get(m.name as string) as Json).hostPath as Json).path);
    expect(writable).toEqual(['/var/lib/pullwatch']);
    const readOnly = hostMounts.filter((m) => m.readOnly === true).map((m) => ((volumes.get(m.name as string) as Json).hostPath as Json).path);
    for (const p of ['/var/lib/containerd', '/var/lib/docker', '/var/log', '/run/containerd', '/etc/containerd', '/etc/kubernetes', '/var/lib/kubelet']) {
      expect(readOnly).toContain(p);
    }
  });

  it('base: the collector runs non-root with a read-only root filesystem, SQLite on its PVC', () => {
    const objs = build('base');
    const dep = find(objs, 'Deployment', 'pullwatch-collector');
    expect(podSpec(dep).securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 });
    expect(podSpec(dep).automountServiceAccountToken).toBe(false);
    const c = container(dep, 'collector');
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
    expect((c.env as Json[]).find((e) => e.name === 'PULLWATCH_DB')).toEqual({ name: 'PULLWATCH_DB', value: '/data/collector.db' });
    expect((dep.spec as Json).strategy).toEqual({ type: 'Recreate' });
    find(objs, 'PersistentVolumeClaim', 'pullwatch-collector-data');
    const svc = find(objs, 'Service', 'pullwatch-collector');
    expect((svc.spec as Json).type).toBe('ClusterIP');
    // No secret values ship in the kustomization.
    expect(objs.filter((o) => o.kind === 'Secret')).toEqual([]);
  });

  it('overlays: postgres (replicas, URL from a Secret, no PVC), tune (config writable), servicemonitor', () => {
    const pg = build('overlays/postgres');
    const dep = find(pg, 'Deployment', 'pullwatch-collector');
    expect((dep.spec as Json).replicas).toBeGreaterThan(1);
    expect((c(dep).env as Json[]).find((e) => e.name === 'PULLWATCH_DB')).toEqual({
      name: 'PULLWATCH_DB', valueFrom: { secretKeyRef: { name: 'pullwatch-postgres', key: 'url' } },
    });
    expect(pg.some((o) => o.kind === 'PersistentVolumeClaim')).toBe(false);
    expect(JSON.stringify(podSpec(dep).volumes)).not.toContain('persistentVolumeClaim');
    find(pg, 'PodDisruptionBudget', 'pullwatch-collector');

    const tune = build('overlays/tune');
    const ds = find(tune, 'DaemonSet', 'pullwatch-agent');
    const mounts = new Map(((container(ds, 'agent').volumeMounts as Json[])).map((m) => [m.mountPath as string, m]));
    for (const p of ['/host/etc/containerd', '/host/etc/kubernetes', '/host/var/lib/kubelet', '/host/etc/systemd/system']) {
      expect(mounts.get(p)?.readOnly, p).not.toBe(true);
    }
    expect(mounts.get('/host/var/log')?.readOnly).toBe(true);

    const sm = build('overlays/servicemonitor');
    expect(sm.filter((o) => o.kind === 'ServiceMonitor').map((o) => (o.metadata as Json).name).sort()).toEqual(['pullwatch-agent', 'pullwatch-collector']);
    find(sm, 'Service', 'pullwatch-agent-metrics');

    function c(d: Json): Json { return container(d, 'collector'); }
  });
});

/**
 * The agent's own Kubernetes client: kubeconfig parsing (what it accepts, what it refuses and how
 * clearly), the in-cluster service account, and the re-read of a rotating token file.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeClient, KubeConfigError, loadKubeConfig, parseKubeConfig } from '../../../agent/kube/api-client.js';

let dir: string;
beforeEach(() => { dir = mkdtempSync(join(tmpdir(), 'pw-kubeconfig-')); });
afterEach(() => { rmSync(dir, { recursive: true, force: true }); });

const b64 = (s: string): string => Buffer.from(s).toString('base64');

/** A kubeconfig with one cluster/user/context; `user` and `cluster` are YAML lines (4-space indented). */
function kubeconfig(cluster: string[], user: string[]): string {
  return [
    'apiVersion: v1', 'kind: Config', 'current-context: ctx', 'preferences: {}',
    'clusters:', '- name: c', '  cluster:', ...cluster.map((l) => `    ${l}`),
    'users:', '- name: u', '  user:', ...(user.length ? user.map((l) => `    ${l}`) : ['    {}']),
    'contexts:', '- name: ctx', '  context:', '    cluster: c', '    user: u', '    namespace: default',
    '',
  ].join('\n');
}

function write(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe('kubeconfig', () => {
  it('token user, CA from certificate-authority-data', () => {
    const cfg = loadKubeConfig(write('kc', kubeconfig(
      ['server: https://10.0.0.1:6443', `certificate-authority-data: ${b64('CA PEM')}`],
      ['token: abc.def.ghi'],
    )));
    expect(cfg.server.href).toBe('https://10.0.0.1:6443/');
    expect(cfg.ca?.toString()).toBe('CA PEM');
    expect(cfg.insecureSkipTlsVerify).toBe(false);
    expect(cfg.auth).toEqual({ kind: 'token', token: 'abc.def.ghi' });
    expect(new KubeClient(cfg).currentToken()).toBe('abc.def.ghi');
  });

  it('tokenFile and certificate-authority resolve relative to the kubeconfig, like kubectl', () => {
    write('ca.crt', 'CA FROM FILE');
    write('tok', 'file-token\n');
    const cfg = loadKubeConfig(write('kc', kubeconfig(['server: https://api.example.com', 'certificate-authority: ca.crt'], ['tokenFile: tok'])));
    expect(cfg.ca?.toString()).toBe('CA FROM FILE');
    expect(cfg.auth).toEqual({ kind: 'tokenFile', path: join(dir, 'tok') });
    expect(new KubeClient(cfg).currentToken()).toBe('file-token');
  });

  it('client certificate and key from -data fields and from files', () => {
    const a = loadKubeConfig(write('kc1', kubeconfig(['server: https://h:6443'], [`client-certificate-data: ${b64('CERT')}`, `client-key-data: ${b64('KEY')}`])));
    expect(a.cert?.toString()).toBe('CERT');
    expect(a.key?.toString()).toBe('KEY');
    expect(a.auth.kind).toBe('none');
    write('c.pem', 'CERT2');
    write('k.pem', 'KEY2');
    const b = loadKubeConfig(write('kc2', kubeconfig(['server: https://h:6443'], [`client-certificate: ${join(dir, 'c.pem')}`, 'client-key: k.pem'])));
    expect(b.cert?.toString()).toBe('CERT2');
    expect(b.key?.toString()).toBe('KEY2');
  });

  it('insecure-skip-tls-verify, basic auth, and a user-less context', () => {
    const a = loadKubeConfig(write('kc1', kubeconfig(['server: https://h:6443', 'insecure-skip-tls-verify: true'], ['username: admin', 'password: s3cret'])));
    expect(a.insecureSkipTlsVerify).toBe(true);
    expect(a.auth).toEqual({ kind: 'basic', username: 'admin', password: 's3cret' });
    const b = parseKubeConfig([
      'current-context: x', 'clusters: [{name: c, cluster: {server: "http://127.0.0.1:8080"}}]',
      'contexts: [{name: x, context: {cluster: c}}]',
    ].join('\n'), 'inline', dir);
    expect(b.auth.kind).toBe('none');
    expect(b.server.protocol).toBe('http:');
  });

  it('refuses exec and auth-provider plugins, saying the agent does not support them', () => {
    const exec = write('kc1', kubeconfig(['server: https://h'], [
      'exec:', '  apiVersion: client.authentication.k8s.io/v1beta1', '  command: aws', '  args: [eks, get-token, --cluster-name, prod]',
    ]));
    expect(() => loadKubeConfig(exec)).toThrow(KubeConfigError);
    expect(() => loadKubeConfig(exec)).toThrow(/exec credential plugin.*not support/);
    const ap = write('kc2', kubeconfig(['server: https://h'], ['auth-provider:', '  name: gcp', '  config: {}']));
    expect(() => loadKubeConfig(ap)).toThrow(/auth-provider plugin.*not support/);
  });

  it('malformed or incomplete kubeconfigs fail with a KubeConfigError naming the problem', () => {
    const cases: Array<[string, RegExp]> = [
      ['clusters: [oops\n', /not valid YAML/],
      ['- just\n- a list\n', /expected a mapping/],
      [kubeconfig(['server: https://h'], []).replace('current-context: ctx', 'current-context: nope'), /current-context "nope" is not in contexts/],
      [kubeconfig(['server: https://h'], []).replace('current-context: ctx\n', ''), /no current-context/],
      [kubeconfig(['server: https://h'], []).replace('    cluster: c\n', '    cluster: other\n'), /cluster "other".*not in clusters/],
      [kubeconfig(['insecure-skip-tls-verify: true'], []), /clusters\.0\.cluster\.server/],
      [kubeconfig(['server: https://h', 'insecure-skip-tls-verify: "yes"'], []), /insecure-skip-tls-verify/],
      [kubeconfig(['server: not a url'], []), /is not a URL/],
      [kubeconfig(['server: ftp://h'], []), /must be http/],
      [kubeconfig(['server: https://h', 'certificate-authority-data: "%%% not base64"'], []), /certificate-authority-data is not valid base64/],
      [kubeconfig(['server: https://h', 'certificate-authority: /nonexistent/ca.crt'], []), /cannot read certificate-authority/],
      [kubeconfig(['server: https://h'], [`client-certificate-data: ${b64('CERT')}`]), /certificate without a key/],
      [kubeconfig(['server: https://h'], ['username: admin']), /username and password/],
      [kubeconfig(['server: http://h:8080'], ['token: t']), /plain http/],
      [kubeconfig(['server: https://h', 'proxy-url: http://proxy:3128'], []), /proxy-url is not supported/],
    ];
    for (const [i, [text, want]] of cases.entries()) {
      const p = write(`bad${i}`, text);
      let caught: unknown;
      try { loadKubeConfig(p); } catch (err) { caught = err; }
      expect(caught, `case ${i}`).toBeInstanceOf(KubeConfigError);
      expect((caught as Error).message, `case ${i}`).toMatch(want);
    }
    expect(() => loadKubeConfig(join(dir, 'missing'))).toThrow(/cannot load kubeconfig/);
  });
});

describe('in-cluster service account', () => {
  function saDir(token: string): string {
    const d = mkdtempSync(join(dir, 'sa-'));
    writeFileSync(join(d, 'ca.crt'), 'CLUSTER CA');
    writeFileSync(join(d, 'token'), token);
    return d;
  }

  it('needs KUBERNETES_SERVICE_HOST, a port, the CA and the token', () => {
    const sa = saDir('t1');
    expect(() => loadKubeConfig(undefined, { env: {}, serviceAccountDir: sa })).toThrow(/KUBERNETES_SERVICE_HOST unset/);
    expect(() => loadKubeConfig(undefined, { env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: 'x' }, serviceAccountDir: sa })).toThrow(/not a port/);
    expect(() => loadKubeConfig('in-cluster', { env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' }, serviceAccountDir: join(dir, 'none') })).toThrow(/service account CA/);
    const cfg = loadKubeConfig(undefined, { env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' }, serviceAccountDir: sa });
    expect(cfg.server.href).toBe('https://10.96.0.1/');
    expect(cfg.ca?.toString()).toBe('CLUSTER CA');
    const v6 = loadKubeConfig(undefined, { env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' }, serviceAccountDir: sa });
    expect(v6.server.host).toBe('[fd00::1]:6443');
  });

  it('re-reads the rotating token every refresh period, keeps the last good one if the file vanishes', () => {
    const sa = saDir('token-1\n');
    let now = 1_000_000;
    const client = KubeClient.fromInput(undefined, {
      env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' }, serviceAccountDir: sa,
      tokenRefreshMs: 60_000, now: () => now,
    });
    expect(client.currentToken()).toBe('token-1');
    writeFileSync(join(sa, 'token'), 'token-2');
    now += 30_000;
    expect(client.currentToken()).toBe('token-1'); // cached within the period
    now += 30_000;
    expect(client.currentToken()).toBe('token-2'); // re-read after a minute
    rmSync(join(sa, 'token'));
    now += 61_000;
    expect(client.currentToken()).toBe('token-2');
    writeFileSync(join(sa, 'token'), '');
    now += 61_000;
    expect(client.currentToken()).toBe('token-2'); // an empty file (mid-rewrite) is not a token
    writeFileSync(join(sa, 'token'), 'token-3');
    now += 61_000;
    expect(client.currentToken()).toBe('token-3');
    client.close();
  });
});

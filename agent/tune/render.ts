/** Human rendering of a TunePlan (pure). */
import { formatDuration } from '../../common/duration.js';
import type { SettingSource, TunePlan, TuneSetting } from './types.js';

const LABEL: Record<TuneSetting['id'], string> = {
  'runtime.pullProgressTimeout': 'runtime pull progress deadline',
  'kubelet.imagePullProgressDeadline': 'kubelet --image-pull-progress-deadline',
  'kubelet.serializeImagePulls': 'kubelet serializeImagePulls',
  'kubelet.maxParallelImagePulls': 'kubelet maxParallelImagePulls',
  'kubelet.registryPullQPS': 'kubelet registryPullQPS',
  'kubelet.registryBurst': 'kubelet registryBurst',
};

export function sourceText(s: SettingSource): string {
  switch (s.kind) {
    case 'file': return `${s.path}${s.line ? `:${s.line}` : ''}`;
    case 'flag': return `${s.flag} (${s.path}${s.line ? `:${s.line}` : ''})`;
    case 'default': return 'built-in default';
    case 'absent': return '—';
  }
}

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ').trimEnd()).join('\n');
}

export function renderPlan(plan: TunePlan): string {
  const out: string[] = [];
  const rt = plan.runtime;
  out.push(`runtime: ${rt.name}${rt.version ? ` ${rt.version}` : ' (version unknown)'}${rt.family !== 'unknown' ? ` [${rt.family}]` : ''} — ${rt.detectedBy}`);
  out.push(`kubelet: ${plan.kubelet.version ?? 'version unknown'}${plan.kubelet.configFile ? `, config ${plan.kubelet.configFile}` : ''}${plan.kubelet.configDir ? `, drop-ins ${plan.kubelet.configDir}` : ''}`);
  out.push(`history: ${plan.history.note}`);
  const d = plan.deadline;
  out.push(`deadline: ${formatDuration(d.valueMs)} (${d.basis}) — ${d.reason}`);
  out.push(`rule: ${d.rule}`);
  for (const n of d.notes) out.push(`  note: ${n}`);
  if (d.perRegistry.length) {
    out.push('');
    out.push(table([
      ['REGISTRY', 'COMPLETED', 'GAPS', 'P99 GAP', 'MAX GAP', 'MEDIAN RATE', 'CANCELLED'],
      ...d.perRegistry.map((r) => [
        r.registry, String(r.completedPulls), String(r.idleGaps), formatDuration(r.p99IdleGapMs), formatDuration(r.maxIdleGapMs),
        r.medianRateBytesPerSecond === null ? '—' : `${(r.medianRateBytesPerSecond / 1e6).toFixed(1)} MB/s`, String(r.cancelledByRuntime),
      ]),
    ]));
  }
  out.push('');
  out.push(table([
    ['SETTING', 'EFFECTIVE', 'SET IN', 'RISK', 'RECOMMENDED'],
    ...plan.settings.map((s) => [
      LABEL[s.id], s.effective.display, sourceText(s.source), s.risk.level,
      `${s.recommendation.display}${s.recommendation.apply ? '  (apply)' : s.recommendation.manual ? '  (manual)' : ''}`,
    ]),
  ]));
  out.push('');
  for (const s of plan.settings) {
    out.push(`${LABEL[s.id]}  [${s.component}: ${s.key}]${s.supported ? '' : '  (not available on this version)'}`);
    out.push(`  risk: ${s.risk.text}`);
    out.push(`  recommendation: ${s.recommendation.display} — ${s.recommendation.reason}`);
  }
  if (plan.errors.length) { out.push(''); out.push('errors:'); for (const e of plan.errors) out.push(`  - ${e}`); }
  if (plan.warnings.length) { out.push(''); out.push('warnings:'); for (const w of plan.warnings) out.push(`  - ${w}`); }
  out.push('');
  out.push(`files read (${plan.filesRead}): ${plan.files.filter((f) => f.status === 'read').map((f) => f.realPath ? `${f.path} -> ${f.realPath}` : f.path).join(', ') || 'none'}`);
  const apply = plan.settings.filter((s) => s.recommendation.apply).length;
  out.push(apply ? `\`pullwatch tune apply\` would change ${apply} setting(s); \`--dry-run\` shows the diff.` : 'nothing for `pullwatch tune apply` to change.');
  return out.join('\n') + '\n';
}

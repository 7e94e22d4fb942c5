// pullwatch dashboard: polls the collector's read API every 2 s and renders with DOM APIs only
// (textContent / createElement): data is never parsed as HTML, so nothing needs escaping by hand.

const POLL_MS = 2000;
const REQUEST_TIMEOUT_MS = 5000;
const MAX_LAYERS_SHOWN = 8;
const RECENT_INCIDENTS = 10;
/** Rows drawn per table (a 5,000-node fleet stays responsive); problems sort first, so they are always shown. */
const MAX_ROWS = 300;
const PALETTE = ['#58a6ff', '#ff7b72', '#d2a8ff', '#3fb950', '#f0b429', '#79c0ff', '#ffa657', '#56d4dd', '#e86ca6', '#a5d6ff'];
const SVG_NS = 'http://www.w3.org/2000/svg';

const view = { lastOkAt: 0, failingSince: 0, lastError: '' };

// ------------------------------------------------------------------ DOM helpers

/** el('div', { class: 'x', title: 'y' }, child, 'text', …) — strings become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = String(v);
    else node.setAttribute(k, String(v));
  }
  append(node, children);
  return node;
}
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs ?? {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  append(node, children);
  return node;
}
function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}
function badge(text, tone, extra) { return el('span', { class: `badge b-${tone}${extra ? ` ${extra}` : ''}` }, text); }
function empty(text, good) { return el('div', { class: good ? 'empty good' : 'empty' }, text); }

// ------------------------------------------------------------------ formatting

function num(v) { return typeof v === 'number' && Number.isFinite(v) ? v : undefined; }
function str(v) { return typeof v === 'string' ? v : v === undefined || v === null ? '' : String(v); }
function arr(v) { return Array.isArray(v) ? v : []; }
function time(v) { const t = Date.parse(str(v)); return Number.isFinite(t) ? t : undefined; }

function fmtBytes(n) {
  n = num(n);
  if (n === undefined) return '?';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${i === 0 ? n : n >= 100 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
}
function fmtRate(n) { return num(n) === undefined ? '?' : `${fmtBytes(n)}/s`; }
function fmtDuration(ms) {
  ms = num(ms);
  if (ms === undefined) return '?';
  let s = Math.max(0, Math.round(ms / 1000));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d${h}h`;
  if (h) return `${h}h${m}m`;
  if (m) return `${m}m${String(s).padStart(2, '0')}s`;
  return `${s}s`;
}
function ago(iso) {
  const t = time(iso);
  return t === undefined ? 'never' : `${fmtDuration(Date.now() - t)} ago`;
}
function pct(done, total) {
  if (!num(total) || total <= 0 || num(done) === undefined) return undefined;
  return Math.max(0, Math.min(100, (done / total) * 100));
}
function shortDigest(d) { const s = str(d); const i = s.indexOf(':'); return i >= 0 ? s.slice(i + 1, i + 13) : s.slice(0, 12); }
function deadlineText(ms) {
  if (ms === null) return 'none';
  if (num(ms) === undefined) return 'unknown';
  return ms === 0 ? 'disabled' : fmtDuration(ms);
}

// ------------------------------------------------------------------ data

async function getJson(path) {
  const res = await fetch(path, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS), cache: 'no-store' });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
  return res.json();
}
/** Accepts `[...]` or `{ <key>: [...] }` so the page survives small API shape changes. */
function listOf(body, key) {
  if (Array.isArray(body)) return body;
  if (body && typeof body === 'object') {
    if (Array.isArray(body[key])) return body[key];
    if (Array.isArray(body.items)) return body.items;
  }
  return [];
}
/** A pull from /v1/pulls: either { node, pull: PullRecord } or a PullRecord with a node field. */
function normPull(p) {
  if (p && typeof p === 'object' && p.pull && typeof p.pull === 'object') return { ...p.pull, node: p.node ?? p.pull.node };
  return p && typeof p === 'object' ? p : undefined;
}

const STATE_ORDER = { stalled: 0, slow: 1, downloading: 2, unpacking: 3 };
const STATE_TONE = { stalled: 'bad', slow: 'warn', downloading: 'info', unpacking: 'info', completed: 'ok', failed: 'bad', 'cancelled-by-runtime': 'bad' };

// ------------------------------------------------------------------ render: summary

function renderSummary(nodes, pulls, incidents) {
  const open = incidents.filter((i) => i.state === 'open' && !i.absorbedBy);
  const stalled = pulls.filter((p) => p.state === 'stalled').length;
  const slow = pulls.filter((p) => p.state === 'slow').length;
  const down = nodes.filter((n) => n.status === 'down').length;
  const stat = (value, label, tone) => el('div', { class: `stat ${tone ?? ''}` }, el('div', { class: 'v' }, value), el('div', { class: 'k' }, label));
  document.getElementById('summary').replaceChildren(
    stat(open.length, 'open incidents', open.length ? 'bad' : ''),
    stat(stalled, 'stalled pulls', stalled ? 'bad' : ''),
    stat(slow, 'slow pulls', slow ? 'warn' : ''),
    stat(pulls.length, 'pulls in flight'),
    stat(`${nodes.length - down}/${nodes.length}`, 'nodes up', down ? 'warn' : ''),
  );
  document.title = open.length || stalled ? `(${open.length + stalled}) pullwatch — ${stalled} stalled` : 'pullwatch';
}

// ------------------------------------------------------------------ render: incidents

const KIND_LABEL = { 'pull-stall': 'pull stalled', registry: 'registry', 'agent-down': 'agent down' };

function renderIncidents(incidents) {
  const root = document.getElementById('incidents');
  const open = incidents.filter((i) => i.state === 'open' && !i.absorbedBy)
    .sort((a, b) => (time(a.openedAt) ?? 0) - (time(b.openedAt) ?? 0));
  const recent = incidents.filter((i) => i.state !== 'open')
    .sort((a, b) => (time(b.resolvedAt ?? b.updatedAt) ?? 0) - (time(a.resolvedAt ?? a.updatedAt) ?? 0))
    .slice(0, RECENT_INCIDENTS);
  const parts = [];
  if (!open.length) parts.push(empty('No open incidents.', true));
  for (const inc of open) parts.push(incidentCard(inc));
  if (recent.length) {
    parts.push(el('div', { class: 'recent' },
      el('h3', null, 'Recently resolved'),
      el('ul', null, recent.map((inc) => el('li', null,
        el('span', { class: 'when' }, ago(inc.resolvedAt ?? inc.updatedAt)),
        badge(KIND_LABEL[inc.kind] ?? str(inc.kind), 'muted'),
        el('span', null, str(inc.summary)),
        inc.resolution ? el('span', { class: 'why' }, `— ${str(inc.resolution)}`) : null,
      ))),
    ));
  }
  root.replaceChildren(...parts);
}

function incidentCard(inc) {
  const members = arr(inc.members);
  const nodes = arr(inc.nodes);
  const meta = [`opened ${ago(inc.openedAt)}`];
  if (inc.registry) meta.push(`registry ${str(inc.registry)}`);
  if (nodes.length) meta.push(`${nodes.length} node${nodes.length === 1 ? '' : 's'}: ${nodes.slice(0, 5).map(str).join(', ')}${nodes.length > 5 ? ` +${nodes.length - 5}` : ''}`);
  if (inc.resolvingSince) meta.push(`resolving since ${ago(inc.resolvingSince)}`);
  const tone = inc.kind === 'agent-down' ? 'warn' : 'bad';
  const card = el('div', { class: `incident k-${str(inc.kind)}`, 'data-incident-id': str(inc.id) },
    el('div', { class: 'head' }, badge(KIND_LABEL[inc.kind] ?? str(inc.kind), tone), el('span', { class: 'summary-text' }, str(inc.summary))),
    el('div', { class: 'meta' }, meta.join(' · ')),
  );
  if (members.length) {
    const shown = members.slice(0, 6);
    card.append(el('div', { class: 'tbl-wrap' }, el('table', null,
      el('thead', null, el('tr', null, el('th', null, 'Image'), el('th', null, 'Node'), el('th', null, 'Progress'),
        el('th', { class: 'num' }, 'No bytes for'), el('th', null, 'Runtime deadline'), el('th', null, 'Waiting pods'))),
      el('tbody', null, shown.map((m) => el('tr', null,
        el('td', { class: 'image' }, str(m.image)),
        el('td', { class: 'nowrap' }, str(m.node)),
        el('td', null, progress(m.bytesDone, m.bytesTotal, m.active === false ? 'done' : 'stalled')),
        el('td', { class: 'num' }, m.active === false ? el('span', { class: 'sub' }, 'resumed') : el('span', { class: 'idle-bad' }, fmtDuration(Date.now() - (time(m.lastProgressAt) ?? Date.now())))),
        el('td', null, deadlineText(m.runtimeDeadlineMs), m.recommendation ? el('div', { class: 'sub' }, `recommend ${str(m.recommendation)}`) : null),
        el('td', { class: 'sub' }, podList(m.pods)),
      ))),
    )));
    if (members.length > shown.length) card.append(el('div', { class: 'more' }, `+${members.length - shown.length} more`));
  }
  return card;
}

function podList(pods) {
  const list = arr(pods);
  if (!list.length) return '—';
  const names = list.slice(0, 3).map((p) => `${str(p.namespace)}/${str(p.name)}`);
  return names.join(', ') + (list.length > 3 ? ` +${list.length - 3}` : '');
}

// ------------------------------------------------------------------ render: pulls

function progress(done, total, tone) {
  const p = pct(done, total);
  const fill = el('div', { class: 'fill' });
  fill.style.width = `${p ?? 100}%`;
  const bar = el('div', { class: `bar ${p === undefined ? 'unknown' : tone}`, role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': p === undefined ? undefined : Math.round(p) }, fill);
  return el('div', { class: 'progress' }, bar,
    el('div', { class: 'label' },
      el('span', null, `${fmtBytes(done)} / ${num(total) === undefined ? '?' : fmtBytes(total)}`),
      el('span', null, p === undefined ? '' : `${p.toFixed(p < 10 ? 1 : 0)}%`)));
}

function renderPulls(pulls) {
  const root = document.getElementById('pulls');
  if (!pulls.length) { root.replaceChildren(empty('No pulls in flight.')); return; }
  const sorted = [...pulls].sort((a, b) => (STATE_ORDER[a.state] ?? 9) - (STATE_ORDER[b.state] ?? 9) || (num(b.idleSeconds) ?? 0) - (num(a.idleSeconds) ?? 0)).slice(0, MAX_ROWS);
  const rows = sorted.map((p) => {
    const tone = p.state === 'stalled' ? 'stalled' : p.state === 'slow' ? 'slow' : '';
    // Seconds since the last byte, as of now (the record's idleSeconds is as of its last update).
    const lastByte = time(p.lastProgressAt);
    const idle = (p.state === 'stalled' || p.state === 'slow') && lastByte !== undefined
      ? Math.max(num(p.idleSeconds) ?? 0, (Date.now() - lastByte) / 1000) : num(p.idleSeconds) ?? 0;
    const layers = arr(p.layers).filter((l) => l && typeof l === 'object');
    const shown = layers.slice(0, MAX_LAYERS_SHOWN);
    const layerBars = shown.length ? el('div', { class: 'layers' }, shown.map((l) => {
      const lt = l.state === 'stalled' ? 'stalled' : l.state === 'slow' ? 'slow' : l.state === 'committed' ? 'done' : '';
      const lp = pct(l.bytesDone, l.bytesTotal);
      const fill = el('div', { class: 'fill' });
      fill.style.width = `${l.state === 'committed' ? 100 : lp ?? 100}%`;
      return el('div', { class: 'layer', title: `${str(l.digest)} — ${str(l.state)}` },
        el('span', { class: 'digest' }, shortDigest(l.digest)),
        el('div', { class: `bar ${lp === undefined && l.state !== 'committed' ? 'unknown' : lt}` }, fill),
        el('span', { class: 'lb' }, l.state === 'committed' ? `${fmtBytes(l.bytesDone)} ✓` : `${fmtBytes(l.bytesDone)} / ${num(l.bytesTotal) === undefined ? '?' : fmtBytes(l.bytesTotal)}`));
    }), layers.length > shown.length ? el('div', { class: 'more' }, `+${layers.length - shown.length} more layers`) : null) : null;
    return el('tr', { class: tone ? `row-${tone}` : '', 'data-pull-id': str(p.id) },
      el('td', null, badge(str(p.state), STATE_TONE[p.state] ?? 'muted')),
      el('td', null, el('div', { class: 'image' }, str(p.image)), el('div', { class: 'pods' }, podList(p.pods))),
      el('td', { class: 'nowrap' }, str(p.node) || '—'),
      el('td', { class: 'progress-cell' }, progress(p.bytesDone, p.bytesTotal, tone), layerBars),
      el('td', { class: 'num' }, fmtRate(p.rateBytesPerSecond)),
      el('td', { class: 'num' }, el('span', { class: idle >= 60 ? 'idle-bad' : idle >= 10 ? 'idle-warn' : '' }, fmtDuration(idle * 1000))),
      el('td', { class: 'nowrap' }, deadlineText(p.runtimeDeadlineMs), el('div', { class: 'sub' }, `${str(p.runtime?.name)} ${str(p.runtime?.version)}`.trim())),
    );
  });
  const note = pulls.length > sorted.length ? el('div', { class: 'more' }, `showing ${sorted.length} of ${pulls.length} pulls (stalled and slow first)`) : '';
  root.replaceChildren(note, el('div', { class: 'tbl-wrap' }, el('table', null,
    el('thead', null, el('tr', null, el('th', null, 'State'), el('th', null, 'Image · waiting pods'), el('th', null, 'Node'),
      el('th', null, 'Progress · layers'), el('th', { class: 'num' }, 'Rate'), el('th', { class: 'num' }, 'Idle'), el('th', null, 'Runtime deadline'))),
    el('tbody', null, rows))));
}

// ------------------------------------------------------------------ render: chart

const registryColors = new Map();
function colorFor(registry) {
  if (!registryColors.has(registry)) registryColors.set(registry, PALETTE[registryColors.size % PALETTE.length]);
  return registryColors.get(registry);
}

function renderChart(buckets) {
  const root = document.getElementById('chart');
  const HOUR = 3600_000;
  const nowHour = Math.floor(Date.now() / HOUR) * HOUR;
  const hours = Array.from({ length: 24 }, (_, i) => nowHour - (23 - i) * HOUR);
  const byHour = new Map(hours.map((h) => [h, new Map()]));
  const totals = new Map();
  for (const b of buckets) {
    const t = time(b.hour);
    const n = num(b.stalls) ?? num(b.count) ?? 0;
    if (t === undefined || n <= 0) continue;
    const slot = byHour.get(Math.floor(t / HOUR) * HOUR);
    if (!slot) continue;
    const reg = str(b.registry) || 'unknown';
    slot.set(reg, (slot.get(reg) ?? 0) + n);
    totals.set(reg, (totals.get(reg) ?? 0) + n);
  }
  const registries = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || a.localeCompare(b));
  const max = Math.max(1, ...[...byHour.values()].map((m) => [...m.values()].reduce((s, v) => s + v, 0)));
  const step = max <= 5 ? 1 : Math.ceil(max / 4);
  const top = Math.ceil(max / step) * step;
  const W = 960, H = 170, L = 34, R = 8, T = 10, B = 24;
  const cw = (W - L - R) / 24, ch = H - T - B;
  const y = (v) => T + ch - (v / top) * ch;
  const g = [];
  for (let v = 0; v <= top; v += step) {
    g.push(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    g.push(svg('text', { class: 'axis', x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, String(v)));
  }
  hours.forEach((h, i) => {
    const slot = byHour.get(h);
    let acc = 0;
    for (const reg of registries) {
      const v = slot.get(reg) ?? 0;
      if (!v) continue;
      g.push(svg('rect', { x: L + i * cw + 2, y: y(acc + v), width: Math.max(1, cw - 4), height: Math.max(1, y(acc) - y(acc + v)), fill: colorFor(reg), rx: 1.5 },
        svg('title', null, `${new Date(h).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })} — ${reg}: ${v} stall${v === 1 ? '' : 's'}`)));
      acc += v;
    }
    if (i % 3 === 2 || i === 23) {
      g.push(svg('text', { class: 'axis', x: L + i * cw + cw / 2, y: H - 6, 'text-anchor': 'middle' },
        i === 23 ? 'now' : new Date(h).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })));
    }
  });
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Stalls per hour by registry, last 24 hours' }, g);
  const legend = registries.length
    ? el('div', { class: 'legend' }, registries.map((r) => {
      const sw = el('span', { class: 'sw' });
      sw.style.background = colorFor(r);
      return el('span', null, sw, r, el('span', { class: 'total' }, String(totals.get(r))));
    }))
    : empty('No stalls in the last 24 hours.', true);
  root.replaceChildren(el('div', { class: 'chart' }, chart, legend));
}

// ------------------------------------------------------------------ render: nodes

function renderNodes(nodes) {
  const root = document.getElementById('nodes');
  if (!nodes.length) { root.replaceChildren(empty('No agent has reported yet.')); return; }
  const trouble = (n) => (n.status === 'down' ? 0 : (num(n.eventsDropped) ?? 0) > 0 || (num(n.sourceErrors) ?? 0) > 0 ? 1 : 2);
  const sorted = [...nodes].sort((a, b) => trouble(a) - trouble(b) || str(a.node).localeCompare(str(b.node))).slice(0, MAX_ROWS);
  const note = nodes.length > sorted.length ? el('div', { class: 'more' }, `showing ${sorted.length} of ${nodes.length} nodes (down and erroring first)`) : null;
  root.replaceChildren(note ?? '', el('div', { class: 'tbl-wrap' }, el('table', null,
    el('thead', null, el('tr', null, el('th', null, 'Node'), el('th', null, 'Status'), el('th', { class: 'num' }, 'Heartbeat'),
      el('th', null, 'Runtime'), el('th', null, 'Pull deadline'), el('th', { class: 'num' }, 'Pulls'),
      el('th', { class: 'num' }, 'Queue'), el('th', { class: 'num' }, 'Dropped'), el('th', { class: 'num' }, 'Source errors'), el('th', null, 'Agent'))),
    el('tbody', null, sorted.map((n) => {
      const age = Date.now() - (time(n.lastHeartbeatAt) ?? 0);
      const interval = (num(n.intervalSeconds) ?? 30) * 1000;
      const rt = n.runtime ?? {};
      const deadline = n.runtimeHasDeadline === true ? badge(`yes · ${deadlineText(rt.pullDeadlineMs)}`, 'ok', 'plain')
        : n.runtimeHasDeadline === false ? badge('none', 'warn') : badge('unknown', 'muted');
      return el('tr', { 'data-node': str(n.node) },
        el('td', { class: 'nowrap' }, str(n.node)),
        el('td', null, n.status === 'down' ? badge('down', 'bad') : badge('up', 'ok')),
        el('td', { class: 'num' }, el('span', { class: age > 3 * interval ? 'idle-bad' : age > 2 * interval ? 'idle-warn' : '' }, ago(n.lastHeartbeatAt))),
        el('td', { class: 'nowrap' }, rt.name ? `${str(rt.name)} ${str(rt.version)}`.trim() : '—'),
        el('td', null, deadline),
        el('td', { class: 'num' }, str(num(n.pullsInFlight) ?? 0)),
        el('td', { class: 'num' }, str(num(n.queueDepth) ?? 0)),
        el('td', { class: 'num' }, el('span', { class: (num(n.eventsDropped) ?? 0) > 0 ? 'idle-warn' : '' }, str(num(n.eventsDropped) ?? 0))),
        el('td', { class: 'num' }, str(num(n.sourceErrors) ?? 0)),
        el('td', { class: 'sub' }, str(n.agentVersion)),
      );
    })))));
}

// ------------------------------------------------------------------ status + loop

function renderStatus() {
  const root = document.getElementById('status');
  const text = root.querySelector('.text');
  if (view.failingSince) {
    root.className = 'status down';
    text.textContent = `collector unreachable for ${fmtDuration(Date.now() - view.failingSince)} — showing data from ${view.lastOkAt ? ago(new Date(view.lastOkAt).toISOString()) : 'never'} (${view.lastError})`;
  } else if (view.lastOkAt) {
    root.className = 'status live';
    text.textContent = `live · updated ${new Date(view.lastOkAt).toLocaleTimeString()}`;
  }
}

async function refresh() {
  try {
    const [nodesB, pullsB, openB, resolvedB, stallsB] = await Promise.all([
      getJson('/v1/nodes'), getJson('/v1/pulls'),
      getJson('/v1/incidents?state=open&limit=1000'), getJson(`/v1/incidents?state=resolved&limit=${RECENT_INCIDENTS}`),
      getJson('/v1/stats/stalls?hours=24'),
    ]);
    const nodes = listOf(nodesB, 'nodes').filter((n) => n && typeof n === 'object');
    const pulls = listOf(pullsB, 'pulls').map(normPull).filter(Boolean)
      .filter((p) => !['completed', 'failed', 'cancelled-by-runtime'].includes(p.state));
    const byId = new Map();
    for (const i of [...listOf(openB, 'incidents'), ...listOf(resolvedB, 'incidents')]) {
      if (i && typeof i === 'object' && !byId.has(i.id)) byId.set(i.id, i);
    }
    const incidents = [...byId.values()];
    const stalls = listOf(stallsB, 'buckets').length ? listOf(stallsB, 'buckets') : listOf(stallsB, 'stalls');
    renderSummary(nodes, pulls, incidents);
    renderIncidents(incidents);
    renderPulls(pulls);
    renderChart(stalls);
    renderNodes(nodes);
    view.lastOkAt = Date.now();
    view.failingSince = 0;
    document.body.dataset.updatedAt = String(view.lastOkAt);
  } catch (e) {
    if (!view.failingSince) view.failingSince = Date.now();
    view.lastError = e instanceof Error ? e.message : String(e);
  }
  renderStatus();
}

async function loop() {
  await refresh();
  setTimeout(loop, POLL_MS);
}

loop();

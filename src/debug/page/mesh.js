// The mesh page of the operations server (served at `/`, no build step): reads `/debug/mesh`
// and draws it; live by server-sent events (`/debug/events`), polling when they are refused or
// unavailable. Every name is user input: text goes in through textContent and setAttribute only
// (never innerHTML), and the Content-Security-Policy allows no inline script.

const SVG = 'http://www.w3.org/2000/svg';
const NODE_W = 220;
const NODE_H = 40;
const ROW_GAP = 14;
const COL_GAP = 90;
const MARGIN = 16;
/** A graph column longer than this is wrapped into several (a mesh of 1000 identities stays viewable). */
const ROWS_PER_COLUMN = 25;
const POLL_MS = 2000;
const EVENTS_RETRY_MS = 30000;

/** An HTML element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  return withAttrs(document.createElement(tag), attrs, children);
}

/** An SVG element with attributes and children. */
function svg(tag, attrs, ...children) {
  return withAttrs(document.createElementNS(SVG, tag), attrs, children);
}

function withAttrs(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(typeof child === 'string' || typeof child === 'number' ? document.createTextNode(String(child)) : child);
  }
  return node;
}

function fill(tbody, rows, empty, columns) {
  tbody.replaceChildren(...(rows.length > 0 ? rows : [el('tr', { class: 'empty' }, el('td', { colspan: columns, class: 'muted' }, empty))]));
}

/** Ranks of the nodes (longest path from a node nobody reaches, Kahn's order; nodes on cycles after the rest). O(V + E). */
function ranks(names, pairs) {
  const rank = new Map(names.map((n) => [n, 0]));
  const incoming = new Map(names.map((n) => [n, 0]));
  const out = new Map(names.map((n) => [n, []]));
  for (const [s, d] of pairs) {
    if (s === d) continue;
    out.get(s).push(d);
    incoming.set(d, incoming.get(d) + 1);
  }
  const queue = names.filter((n) => incoming.get(n) === 0);
  const done = new Set();
  for (let i = 0; i < queue.length; i++) {
    const n = queue[i];
    done.add(n);
    for (const d of out.get(n)) {
      rank.set(d, Math.max(rank.get(d), rank.get(n) + 1));
      incoming.set(d, incoming.get(d) - 1);
      if (incoming.get(d) === 0) queue.push(d);
    }
  }
  const deepest = Math.max(0, ...queue.map((n) => rank.get(n)));
  for (const n of names) if (!done.has(n)) rank.set(n, Math.max(rank.get(n), deepest + 1));
  return rank;
}

/** Lays out the nodes by rank, left to right, each rank wrapped into columns of ROWS_PER_COLUMN. */
function layout(names, rank) {
  const byRank = new Map();
  for (const n of names) {
    const r = rank.get(n);
    if (!byRank.has(r)) byRank.set(r, []);
    byRank.get(r).push(n);
  }
  const position = new Map();
  let column = 0;
  let rows = 0;
  for (const r of [...byRank.keys()].sort((a, b) => a - b)) {
    const list = byRank.get(r);
    for (let i = 0; i < list.length; i++) {
      const c = column + Math.floor(i / ROWS_PER_COLUMN);
      const row = i % ROWS_PER_COLUMN;
      position.set(list[i], { x: MARGIN + c * (NODE_W + COL_GAP), y: MARGIN + row * (NODE_H + ROW_GAP) });
      rows = Math.max(rows, row + 1);
    }
    column += Math.ceil(list.length / ROWS_PER_COLUMN);
  }
  return { position, columns: column, rows };
}

function curve(from, to) {
  const x1 = from.x + NODE_W;
  const y1 = from.y + NODE_H / 2;
  const x2 = to.x;
  const y2 = to.y + NODE_H / 2;
  if (x2 > x1) {
    const mid = (x1 + x2) / 2;
    return `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`;
  }
  // Back or same-column edge: loop around below.
  const dip = Math.max(y1, y2) + NODE_H;
  return `M${x1},${y1} C${x1 + COL_GAP / 2},${dip} ${x2 - COL_GAP / 2},${dip} ${x2},${y2}`;
}

function node(identity, pos, cls) {
  const services = identity.services;
  const sub = services.length === 0 ? 'no service' : services.slice(0, 2).join(', ') + (services.length > 2 ? ` +${services.length - 2}` : '');
  const proxies = identity.proxies > 0 ? ` · ${identity.proxies} prox${identity.proxies === 1 ? 'y' : 'ies'}` : '';
  return svg(
    'g',
    { class: cls, 'data-identity': identity.name, transform: `translate(${pos.x},${pos.y})` },
    svg('title', {}, `${identity.name}\nservices: ${services.join(', ') || 'none'}\nconnected proxies: ${identity.proxies}`),
    svg('rect', { width: NODE_W, height: NODE_H, rx: 6 }),
    svg('text', { class: 'label', x: 8, y: 16 }, clip(identity.name, 32)),
    svg('text', { class: 'sub', x: 8, y: 31 }, clip(sub + proxies, 38)),
  );
}

function clip(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Draws the access graph: identities as nodes, one path per source → destination pair (or the permissive hub). */
function drawGraph(view) {
  const graph = document.getElementById('graph');
  const identities = view.identities;
  const names = identities.map((i) => i.name);
  const pairs = new Map();
  for (const e of view.edges) {
    const key = `${e.source}\u0000${e.destination}`;
    const pair = pairs.get(key);
    if (pair) pair.targets.push(e);
    else pairs.set(key, { source: e.source, destination: e.destination, targets: [e] });
  }
  const rank = view.permissive ? new Map(names.map((n) => [n, 0])) : ranks(names, [...pairs.values()].map((p) => [p.source, p.destination]));
  const { position, columns, rows } = layout(names, rank);
  const parts = [
    svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, svg('path', { class: 'arrow', d: 'M0,0 L10,5 L0,10 z' }))),
  ];
  const edges = svg('g', { class: 'edges' });
  const nodes = svg('g', { class: 'nodes' });
  let width = MARGIN * 2 + Math.max(1, columns) * (NODE_W + COL_GAP) - COL_GAP;
  const height = MARGIN * 2 + Math.max(1, rows) * (NODE_H + ROW_GAP) - ROW_GAP + NODE_H;
  if (view.permissive) {
    const hub = { x: width + COL_GAP, y: MARGIN };
    width = hub.x + NODE_W + MARGIN;
    nodes.append(
      svg(
        'g',
        { class: 'hub', 'data-permissive': 'true', transform: `translate(${hub.x},${hub.y})` },
        svg('title', {}, 'Permissive traffic policy mode: every identity may reach every service of the mesh; TrafficTargets are not enforced.'),
        svg('rect', { width: NODE_W, height: NODE_H, rx: 6 }),
        svg('text', { class: 'label', x: 8, y: 16 }, 'permissive mode'),
        svg('text', { class: 'sub', x: 8, y: 31 }, 'any identity → any service'),
      ),
    );
    for (const n of names) {
      edges.append(svg('path', { class: 'edge permissive', 'data-source': n, 'data-destination': '*', d: curve(position.get(n), hub) }));
    }
  } else {
    for (const p of pairs.values()) {
      const from = position.get(p.source);
      const to = position.get(p.destination);
      const tt = p.targets.map((t) => t.trafficTarget);
      edges.append(
        svg(
          'path',
          { class: 'edge', 'data-source': p.source, 'data-destination': p.destination, 'data-traffic-targets': tt.join(' '), d: curve(from, to), 'marker-end': 'url(#arrow)' },
          svg('title', {}, `${p.source} → ${p.destination}\nTrafficTarget ${tt.join(', ')}`),
        ),
      );
    }
  }
  for (const identity of identities) {
    nodes.append(node(identity, position.get(identity.name), identity.proxies > 0 ? 'node has-proxies' : 'node'));
  }
  graph.setAttribute('width', String(width));
  graph.setAttribute('height', String(height));
  graph.setAttribute('viewBox', `0 0 ${width} ${height}`);
  graph.setAttribute('data-mode', view.permissive ? 'permissive' : 'smi');
  graph.replaceChildren(...parts, edges, nodes);
  if (focused !== null) {
    const again = focused;
    focused = null;
    focusIdentity(names.includes(again) ? again : null);
  }

  const mode = document.getElementById('mode');
  mode.setAttribute('data-mode', view.permissive ? 'permissive' : 'smi');
  mode.textContent = view.permissive
    ? 'Permissive traffic policy mode: every identity may talk to every service (TrafficTargets are not enforced).'
    : `SMI mode: only what TrafficTargets allow (${view.edges.length} source → destination rule${view.edges.length === 1 ? '' : 's'}); anything else is denied.`;

  drawAccessTable(view);
}

/** The access table, drawn only while it is open (thousands of rows for a large mesh). */
function drawAccessTable(view) {
  const access = document.querySelector('#access tbody');
  if (!document.getElementById('access-details').open) {
    access.replaceChildren();
    return;
  }
  const rowsOut = view.permissive
    ? [el('tr', { 'data-permissive': 'true' }, el('td', {}, 'every identity'), el('td', {}, 'every service'), el('td', {}, 'permissive mode'), el('td', {}, 'all'))]
    : view.edges.map((e) =>
        el(
          'tr',
          { 'data-source': e.source, 'data-destination': e.destination },
          el('td', {}, e.source),
          el('td', {}, e.destination),
          el('td', {}, e.trafficTarget),
          el('td', { class: 'mono' }, routes(e)),
        ),
      );
  fill(access, rowsOut, 'nothing is allowed', 4);
}

function routes(edge) {
  const parts = [];
  if (edge.httpMatches.length > 0) parts.push(`HTTP ${edge.httpMatches.join(', ')}`);
  if (edge.tcpPorts === 'any') parts.push('TCP any port');
  else if (Array.isArray(edge.tcpPorts)) parts.push(`TCP ${edge.tcpPorts.join(', ')}`);
  return parts.join('; ') || 'all';
}

function drawSplits(view) {
  const rows = view.trafficSplits.map((split) => {
    const total = split.backends.reduce((sum, b) => sum + b.weight, 0);
    return el(
      'tr',
      { 'data-split': split.name },
      el('td', {}, split.name),
      el('td', {}, `${split.namespace}/${split.service}`),
      el(
        'td',
        {},
        ...split.backends.map((b) =>
          el(
            'span',
            { class: 'backend', 'data-backend': b.service, 'data-weight': b.weight },
            el('span', { class: 'name' }, b.service),
            el('meter', { min: 0, max: Math.max(1, total), value: b.weight }),
            el('span', { class: 'weight' }, String(b.weight)),
            el('span', { class: 'muted' }, total > 0 ? `(${Math.round((b.weight * 100) / total)}%)` : ''),
          ),
        ),
      ),
    );
  });
  fill(document.querySelector('#splits tbody'), rows, 'no TrafficSplit', 3);
}

function drawProxies(view) {
  const rows = view.proxies.map((p) =>
    el(
      'tr',
      { 'data-proxy': p.uuid, 'data-identity': p.identity },
      el('td', { class: 'mono' }, p.uuid),
      el('td', {}, p.identity),
      el('td', {}, p.clientType),
      el('td', {}, new Date(p.connectedSince).toLocaleString()),
      el('td', {}, ...Object.entries(p.types).map(([type, state]) => el('span', { class: `state ${state}`, 'data-type': type, 'data-state': state, title: state }, `${type} ${state}`))),
      el('td', {}, p.lastNack ? `${p.lastNack.type} at ${new Date(p.lastNack.at).toLocaleTimeString()}: ${p.lastNack.message}` : '—'),
    ),
  );
  fill(document.querySelector('#proxies tbody'), rows, 'no proxy connected', 6);
}

function drawPolicyStatus(view) {
  const summary = document.getElementById('policy-summary');
  const tbody = document.querySelector('#policy-status tbody');
  if (!Array.isArray(view.policyStatus)) {
    summary.textContent = 'This controller does not report policy status.';
    fill(tbody, [], 'no status reported', 7);
    return;
  }
  const list = view.policyStatus;
  const accepted = list.filter((s) => s.accepted).length;
  const programmed = list.filter((s) => s.accepted && s.nacked === 0 && s.programmed >= s.affected).length;
  summary.textContent = `${accepted} of ${list.length} accepted, ${programmed} of ${list.length} programmed on every affected proxy.`;
  const rows = list.map((s) =>
    el(
      'tr',
      { 'data-kind': s.kind, 'data-name': `${s.namespace}/${s.name}` },
      el('td', {}, String(s.kind)),
      el('td', {}, `${s.namespace}/${s.name}`),
      el('td', {}, String(s.generation ?? '')),
      el(
        'td',
        { class: s.accepted && !s.documentErrors ? 'yes' : 'no' },
        !s.accepted ? `no: ${(s.problems ?? []).join('; ')}` : s.documentErrors ? `yes; its latest document is not loaded: ${s.documentErrors.join('; ')}` : 'yes',
      ),
      el('td', {}, `${s.programmed} of ${s.affected}`),
      el('td', { class: s.nacked > 0 ? 'no' : '' }, String(s.nacked ?? 0)),
      el('td', {}, s.firstNack ? `${s.firstNack.identity} (${s.firstNack.proxy}) ${s.firstNack.type}: ${s.firstNack.message}` : '—'),
    ),
  );
  fill(tbody, rows, 'no policy objects', 7);
}

function drawProblems(view) {
  const p = view.problems;
  document.getElementById('problem-counts').textContent =
    `${p.manifestErrors} manifest error${p.manifestErrors === 1 ? '' : 's'}, ${p.manifestWarnings} warning${p.manifestWarnings === 1 ? '' : 's'}, ` +
    `${p.policyProblems} policy problem${p.policyProblems === 1 ? '' : 's'}, ${p.validationFailures} configuration validation failure${p.validationFailures === 1 ? '' : 's'}`;
  document.getElementById('problems').replaceChildren(...p.texts.map((t) => el('li', {}, t)));
}

function drawServices(view) {
  const rows = view.services.map((s) =>
    el(
      'tr',
      { 'data-service': `${s.namespace}/${s.name}` },
      el('td', {}, `${s.namespace}/${s.name}`),
      el('td', {}, s.ports.map((p) => `${p.port}${p.targetPort !== p.port ? `→${p.targetPort}` : ''}/${p.protocol}`).join(', ')),
      el('td', {}, s.identities.join(', ') || '—'),
      el('td', {}, String(s.endpoints)),
    ),
  );
  fill(document.querySelector('#services tbody'), rows, 'no service', 4);
  applyFilter();
}

function applyFilter() {
  const text = document.getElementById('filter').value.trim().toLowerCase();
  for (const row of document.querySelectorAll('#services tbody tr')) row.hidden = text !== '' && !row.textContent.toLowerCase().includes(text);
}

function drawSummary(view) {
  const p = view.problems;
  const problems = p.manifestErrors + p.policyProblems + p.validationFailures;
  const count = (n, what, bad) => el('span', { class: bad ? 'count bad' : 'count', 'data-count': what }, el('b', {}, String(n)), what);
  document.getElementById('summary').replaceChildren(
    count(view.services.length, 'services'),
    count(view.identities.length, 'identities'),
    count(view.proxies.length, 'connected proxies'),
    count(view.trafficSplits.length, 'traffic splits'),
    count(problems, 'problems', problems > 0),
  );
}

/** The identity whose edges are highlighted (a click on its node; another click, or on the background, clears it). */
let focused = null;

function focusIdentity(identity) {
  focused = identity === focused ? null : identity;
  const graph = document.getElementById('graph');
  graph.classList.toggle('focus', focused !== null);
  for (const g of graph.querySelectorAll('g.node')) g.classList.toggle('selected', g.getAttribute('data-identity') === focused);
  for (const path of graph.querySelectorAll('path.edge')) {
    path.classList.toggle('selected', focused !== null && (path.getAttribute('data-source') === focused || path.getAttribute('data-destination') === focused));
  }
}

/** The view last drawn (the access table draws from it when opened). */
let lastView;

function render(view) {
  if (view.starting) {
    document.getElementById('generation').textContent = 'starting…';
    return;
  }
  const started = performance.now();
  lastView = view;
  document.getElementById('mesh-name').textContent = view.meshName;
  document.getElementById('generation').textContent = `generation ${view.generation}`;
  document.body.setAttribute('data-generation', String(view.generation));
  drawSummary(view);
  drawGraph(view);
  drawSplits(view);
  drawProxies(view);
  drawPolicyStatus(view);
  drawProblems(view);
  drawServices(view);
  // How long drawing took, for tests and benchmarks.
  document.body.setAttribute('data-render-ms', String(Math.round(performance.now() - started)));
  document.body.setAttribute('data-rendered-at-ms', String(Math.round(performance.now())));
}

// Loads are serialized: a change during a load makes one more load after it.
let loading = false;
let again = false;
async function load() {
  if (loading) {
    again = true;
    return;
  }
  loading = true;
  try {
    do {
      again = false;
      const response = await fetch('debug/mesh', { cache: 'no-store' });
      if (response.status === 429) {
        // The controller's budget for the view is spent: once more after the time it names.
        const seconds = Math.min(60, Math.max(1, Number(response.headers.get('retry-after')) || 1));
        setTimeout(load, seconds * 1000);
        return;
      }
      if (!response.ok) throw new Error(`/debug/mesh: ${response.status}`);
      render(await response.json());
    } while (again);
  } catch (err) {
    setLive('offline', `offline (${err instanceof Error ? err.message : String(err)})`);
  } finally {
    loading = false;
  }
}

function setLive(state, text) {
  const live = document.getElementById('live');
  live.setAttribute('data-live', state);
  live.textContent = text;
}

let pollTimer;
function startPolling() {
  if (pollTimer !== undefined) return;
  setLive('polling', `polling every ${POLL_MS / 1000} s`);
  pollTimer = setInterval(load, POLL_MS);
}

function stopPolling() {
  clearInterval(pollTimer);
  pollTimer = undefined;
}

/** Live updates by server-sent events; when refused or closed, polling (and another try later). */
function listen() {
  if (typeof EventSource !== 'function') return startPolling();
  const events = new EventSource('debug/events');
  events.addEventListener('open', () => {
    stopPolling();
    setLive('events', 'live');
  });
  events.addEventListener('mesh', () => load());
  events.addEventListener('error', () => {
    if (events.readyState === EventSource.CLOSED) {
      startPolling();
      setTimeout(listen, EVENTS_RETRY_MS);
    } else {
      setLive('polling', 'reconnecting…');
    }
  });
}

document.getElementById('filter').addEventListener('input', applyFilter);
document.getElementById('graph').addEventListener('click', (event) => focusIdentity(event.target.closest?.('g.node')?.getAttribute('data-identity') ?? null));
document.getElementById('access-details').addEventListener('toggle', () => {
  if (lastView) drawAccessTable(lastView);
});
// The first /debug/mesh answer, embedded by the server in a JSON data block (not a script the
// Content-Security-Policy would refuse): drawn at once, before any fetch (a headless screenshot
// shows it); then the page loads and listens as usual.
const embedded = document.getElementById('mesh-data')?.textContent;
if (embedded) {
  try {
    render(JSON.parse(embedded));
  } catch {
    // Drawn from /debug/mesh below instead.
  }
}
load();
listen();

// Frenzy's dashboard: four views over frenzyd's /v1 API (cluster, jobs, one job, planning),
// hand-written with no library. Every value from the API is put in the page as text nodes or
// SVG attributes, never parsed as markup. The token is typed by the user, kept in this tab's
// session storage and sent as a bearer header; the page itself never holds one.
'use strict';

const POLL_MS = 2000;
const GIB = 1024 ** 3;
const SVGNS = 'http://www.w3.org/2000/svg';
const COLOURS = ['#0b5cad', '#b3261e', '#1b6e20', '#7a4a00', '#6a1b9a', '#00695c', '#444444'];

// ---- small helpers ----
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
function gib(bytes) { return bytes > 0 ? (bytes / GIB).toFixed(1) : '—'; }
function duration(s) {
  if (s === null || s === undefined || !isFinite(s) || s < 0) return '—';
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}
function clock(t) { return t ? new Date(t * 1000).toLocaleTimeString() : '—'; }
function planText(p) {
  if (!p) return '—';
  return `${p.gpus} × ${p.gpu} (TP ${p.tp}, PP ${p.pp}, DP ${p.dp})`;
}
function token() { return sessionStorage.getItem('frenzy-token') || ''; }

async function api(path, options) {
  const o = Object.assign({ headers: {} }, options || {});
  if (token()) o.headers.Authorization = `Bearer ${token()}`;
  if (o.body !== undefined) o.headers['Content-Type'] = 'application/json';
  const r = await fetch(path, o);
  const text = await r.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  if (!r.ok) {
    const err = body && body.error ? body.error : { message: text || r.statusText };
    const field = err.field ? ` (${err.field})` : '';
    throw new Error(`${r.status}: ${err.message}${field}`);
  }
  return body;
}
function showError(e) { document.getElementById('error').textContent = e ? String(e.message || e) : ''; }

// A table whose columns may be sorted by clicking (or pressing Enter on) their headers.
function sortableTable(caption, columns, rows, state, onSort) {
  const head = el('tr');
  columns.forEach((c, i) => {
    const sorted = state.col === i;
    const th = el('th', { scope: 'col', class: c.num ? 'num' : null,
      'aria-sort': sorted ? (state.dir > 0 ? 'ascending' : 'descending') : 'none' });
    th.append(el('button', { type: 'button', text: c.name + (sorted ? (state.dir > 0 ? ' ▲' : ' ▼') : ''),
      on: { click: () => onSort(i) } }));
    head.append(th);
  });
  const sortedRows = rows.slice();
  if (state.col !== null && state.col !== undefined) {
    const key = columns[state.col].key;
    sortedRows.sort((a, b) => {
      const x = key(a), y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * state.dir;
    });
  }
  const body = el('tbody');
  for (const r of sortedRows) {
    body.append(el('tr', { 'data-id': r.id }, ...columns.map(c => {
      const v = c.cell ? c.cell(r) : String(c.key(r));
      return el('td', { class: c.num ? 'num' : null }, v);
    })));
  }
  return el('table', {}, el('caption', { text: caption }), el('thead', {}, head), body);
}

// Round tick values over [lo, hi]: multiples of 1, 2 or 5 x 10^k, at most about `count`.
function niceTicks(lo, hi, count) {
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map(m => m * mag).find(v => v >= raw);
  const ticks = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

// A series' dash pattern: `dash` true for a dashed line, or a pattern of its own (lines that
// coincide stay apart without colour).
function dashOf(ser) { return ser.dash === true ? '6 4' : ser.dash || 'none'; }

// A line chart: series [{name, points: [[x, y]...], dash}], markers [{x, label}].
function lineChart(title, series, opts) {
  const W = 780, H = 300, L = 56, R = 170, T = 30, B = 44;
  const s = svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
  s.append(svg('title', {}, title));
  s.append(svg('text', { x: L, y: 18, 'font-weight': 700 }, title));
  const pts = series.flatMap(x => x.points);
  if (!pts.length) {
    s.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no data yet'));
    return s;
  }
  let x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
  for (const m of opts.markers || []) { x0 = Math.min(x0, m.x); x1 = Math.max(x1, m.x); }
  if (opts.xRange) { x0 = Math.min(x0, opts.xRange[0]); x1 = Math.max(x1, opts.xRange[1]); }
  if (x1 - x0 < 1e-9) x1 = x0 + 1;
  const y0 = 0;
  const top = Math.max(...pts.map(p => p[1]));
  // A fixed top (a percentage) stays; a free one is the first round tick above the highest point.
  let y1 = opts.yMax && top <= opts.yMax ? opts.yMax : top * 1.05;
  if (y1 <= 0) y1 = 1;
  const yTicks = niceTicks(y0, y1, 5);
  if (!opts.yMax || top > opts.yMax) {
    const step = yTicks.length > 1 ? yTicks[1] - yTicks[0] : y1;
    if (yTicks[yTicks.length - 1] < y1) yTicks.push(+(yTicks[yTicks.length - 1] + step).toPrecision(12));
    y1 = yTicks[yTicks.length - 1];
  }
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  s.append(svg('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#767676' }));
  s.append(svg('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#767676' }));
  for (const v of yTicks) {
    s.append(svg('line', { x1: L, y1: Y(v), x2: W - R, y2: Y(v), stroke: '#e4e4e4' }));
    s.append(svg('text', { x: L - 6, y: Y(v) + 4, 'text-anchor': 'end' }, opts.yFmt(v)));
  }
  // Ticks: the caller's values (e.g. GPU counts), else round ones.
  const xTicks = opts.xTicks || niceTicks(x0, x1, 6);
  for (const v of xTicks) {
    const anchor = v === x0 ? 'start' : v === x1 ? 'end' : 'middle';
    s.append(svg('line', { x1: X(v), y1: H - B, x2: X(v), y2: H - B + 4, stroke: '#767676' }));
    s.append(svg('text', { x: X(v), y: H - B + 16, 'text-anchor': anchor }, opts.xFmt(v)));
  }
  s.append(svg('text', { x: (L + W - R) / 2, y: H - 8, 'text-anchor': 'middle' }, opts.xLabel));
  s.append(svg('text', { x: 14, y: (T + H - B) / 2, 'text-anchor': 'middle',
    transform: `rotate(-90 14 ${(T + H - B) / 2})` }, opts.yLabel));
  (opts.markers || []).forEach((m, i) => {
    s.append(svg('line', { x1: X(m.x), y1: T, x2: X(m.x), y2: H - B, stroke: '#9e9e9e', 'stroke-dasharray': '2 3' }));
    s.append(svg('text', { x: X(m.x) + 3, y: T + 12 + (i % 4) * 13 }, m.label));
  });
  series.forEach((ser, i) => {
    if (!ser.points.length) return;
    const colour = ser.colour || COLOURS[i % COLOURS.length];
    const d = ser.points.map((p, k) => `${k ? 'L' : 'M'}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(' ');
    if (!ser.noLine) {
      s.append(svg('path', { d, fill: 'none', stroke: colour, 'stroke-width': 2,
        'stroke-dasharray': dashOf(ser) }));
    }
    if (ser.points.length === 1 || ser.dots) {
      for (const p of ser.points) s.append(svg('circle', { cx: X(p[0]), cy: Y(p[1]), r: 3, fill: colour }));
    }
    const lx = W - R + 14, ly = T + 4 + i * 16;  // the legend: right of the plot
    if (ser.noLine) s.append(svg('circle', { cx: lx + 11, cy: ly, r: 3, fill: colour }));
    else {
      s.append(svg('line', { x1: lx, y1: ly, x2: lx + 22, y2: ly, stroke: colour, 'stroke-width': 2,
        'stroke-dasharray': dashOf(ser) }));
    }
    s.append(svg('text', { x: lx + 28, y: ly + 4 }, ser.name));
  });
  return s;
}

// ---- views ----
const views = {};
let current = null;
let timer = null;
const rates = new Map();  // job id -> [t, tokens] of an earlier poll: the ETA's rate

views.cluster = {
  mount(root) { this.root = root; root.append(el('h2', { text: 'Cluster' }), el('div', { id: 'cluster-body' })); },
  async refresh() {
    const c = await api('/v1/cluster');
    const body = el('div', { id: 'cluster-body' });
    body.append(el('p', { text: `Backend: ${c.backend}; ${c.nodes.length} nodes, ` +
      `${c.nodes.filter(n => n.up).length} up.` }));
    const types = el('table', { id: 'types' }, el('caption', { text: 'GPUs per type' }),
      el('thead', {}, el('tr', {}, ...['GPU type', 'Memory (GiB)', 'Total', 'Used', 'Free']
        .map((h, i) => el('th', { scope: 'col', class: i ? 'num' : null, text: h })))));
    const tb = el('tbody');
    for (const t of c.types) {
      tb.append(el('tr', {}, el('th', { scope: 'row', text: t.gpu }),
        el('td', { class: 'num', text: gib(t.memory_bytes) }), el('td', { class: 'num', text: t.gpus }),
        el('td', { class: 'num', text: t.gpus - t.free }), el('td', { class: 'num', text: t.free })));
    }
    types.append(tb);
    // Used GPUs per type as steps (a count holds until the next sample, the last one until
    // the daemon's now), in minutes before now; at least the last ten minutes.
    const usage = c.usage || [];
    const now = c.now_s || (usage.length ? usage[usage.length - 1][0] : 0);
    const series = c.types.map((t, k) => {
      const points = [];
      usage.forEach((u, i) => {
        const y = t.gpus ? 100 * u[k + 1] / t.gpus : 0;
        if (i) points.push([(u[0] - now) / 60, points[points.length - 1][1]]);
        points.push([(u[0] - now) / 60, y]);
      });
      if (points.length) points.push([0, points[points.length - 1][1]]);
      return { name: t.gpu, points, dash: ['none', '8 4', '2 3', '12 3 2 3'][k % 4] };
    });
    const chart = lineChart('GPUs in use per type (%), up to the last six hours', series,
      { xLabel: 'minutes before now', yLabel: '% of the type in use', yMax: 100, xRange: [-10, 0],
        xFmt: v => v.toFixed(0), yFmt: v => v.toFixed(0) });
    const nodes = el('table', { id: 'nodes' }, el('caption', { text: 'Nodes' }),
      el('thead', {}, el('tr', {}, ...['Node', 'GPU type', 'GPUs', 'Free', 'State']
        .map((h, i) => el('th', { scope: 'col', class: i === 2 || i === 3 ? 'num' : null, text: h })))));
    const nb = el('tbody');
    for (const n of c.nodes) {
      nb.append(el('tr', {}, el('th', { scope: 'row', text: n.name }), el('td', { text: n.gpu }),
        el('td', { class: 'num', text: n.gpus }), el('td', { class: 'num', text: n.free }),
        el('td', { class: n.up ? 'state state-running' : 'state state-failed', text: n.up ? 'up' : 'down' })));
    }
    nodes.append(nb);
    body.append(el('div', { class: 'side' }, el('div', {}, types, nodes), el('div', { class: 'wide' }, chart)));
    if (c.agents && c.agents.length) {
      body.append(el('h3', { text: 'Node agents' }), el('ul', {}, ...c.agents.map(a =>
        el('li', { text: `${a.name}: ${a.gpus} × ${a.gpu}, last heard ${clock(a.last_seen_s)}` }))));
    }
    this.root.querySelector('#cluster-body').replaceWith(body);
  },
};

views.jobs = {
  sort: { col: null, dir: 1 },
  mount(root) {
    this.root = root;
    const form = el('form', { id: 'submit-form', class: 'controls', 'aria-label': 'Submit a job' },
      el('label', {}, 'Model', el('input', { name: 'model', required: true, placeholder: 'llama-2-7b' })),
      el('label', {}, 'Tokens', el('input', { name: 'tokens', required: true, inputmode: 'numeric', value: '1e9' })),
      el('label', {}, 'Global batch', el('input', { name: 'global_batch', required: true, inputmode: 'numeric', value: '64' })),
      el('label', {}, 'Sequence length', el('input', { name: 'seq_len', inputmode: 'numeric', value: '2048' })),
      el('label', {}, 'Name', el('input', { name: 'name' })),
      el('button', { type: 'submit', class: 'action', text: 'Submit' }));
    form.addEventListener('submit', async ev => {
      ev.preventDefault();
      const f = new FormData(form);
      const spec = { model: f.get('model'), tokens: Number(f.get('tokens')),
        global_batch: Number(f.get('global_batch')) };
      if (f.get('seq_len')) spec.seq_len = Number(f.get('seq_len'));
      if (f.get('name')) spec.name = f.get('name');
      try {
        const j = await api('/v1/jobs', { method: 'POST', body: JSON.stringify(spec) });
        showError(null);
        document.getElementById('submitted').textContent = `submitted ${j.id}`;
        await this.refresh();
      } catch (e) { showError(e); }
    });
    const filter = el('div', { class: 'controls' },
      el('label', {}, 'State', el('select', { id: 'state-filter', on: { change: () => this.refresh() } },
        ...['all', 'queued', 'running', 'succeeded', 'failed', 'cancelled'].map(s => el('option', { value: s, text: s })))),
      el('label', {}, 'Filter', el('input', { id: 'text-filter', type: 'search', placeholder: 'id, name, model, user',
        on: { input: () => this.draw() } })));
    root.append(el('h2', { text: 'Jobs' }), el('h3', { text: 'Submit a job' }), form,
      el('p', { id: 'submitted', role: 'status' }), el('h3', { text: 'Queue and jobs' }), filter,
      el('div', { id: 'jobs-table' }));
  },
  async refresh() {
    const state = document.getElementById('state-filter').value;
    const r = await api('/v1/jobs' + (state === 'all' ? '' : `?state=${encodeURIComponent(state)}`));
    const now = Date.now() / 1000;
    for (const j of r.jobs) {
      const prev = rates.get(j.id);
      j.eta = null;
      if (j.state === 'running') {
        const left = j.progress.tokens_total - j.progress.tokens_done;
        let rate = 0;
        if (prev && now - prev[0] > 0.5 && j.progress.tokens_done > prev[1]) {
          rate = (j.progress.tokens_done - prev[1]) / (now - prev[0]);
        } else if (j.plan && j.plan.tokens_per_s) rate = j.plan.tokens_per_s;
        j.eta = rate > 0 ? left / rate : null;
        if (!prev || now - prev[0] > 10) rates.set(j.id, [now, j.progress.tokens_done]);
      }
    }
    this.jobs = r.jobs;
    this.draw();
  },
  draw() {
    if (!this.jobs) return;
    const q = document.getElementById('text-filter').value.toLowerCase();
    const rows = this.jobs.filter(j => !q || [j.id, j.name, j.model, j.user].some(v => v && String(v).toLowerCase().includes(q)));
    const cols = [
      { name: 'Job', key: j => j.id, cell: j => el('a', { href: `#/job/${encodeURIComponent(j.id)}`, text: j.id }) },
      { name: 'Name', key: j => j.name || '' },
      { name: 'Model', key: j => j.model },
      { name: 'State', key: j => j.state, cell: j => el('span', { class: `state state-${j.state}`, text: j.state }) },
      { name: 'Plan', key: j => planText(j.plan) },
      { name: 'GPUs', num: true, key: j => (j.plan ? j.plan.gpus : 0) },
      { name: 'Progress', num: true, key: j => j.progress.fraction, cell: j => {
        const pct = Math.min(100, 100 * j.progress.fraction);
        const bar = el('span', { class: 'bar', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100,
          'aria-valuenow': pct.toFixed(0), 'aria-label': `${j.id} progress` }, el('span'));
        bar.firstChild.style.width = `${pct}%`;
        return el('span', {}, bar, `${pct.toFixed(1)}%`);
      } },
      { name: 'ETA', num: true, key: j => (j.eta === null ? Infinity : j.eta), cell: j => duration(j.eta) },
      { name: 'Attempts', num: true, key: j => j.attempt },
      { name: 'User', key: j => j.user || '' },
    ];
    const t = sortableTable(`${rows.length} of ${this.jobs.length} jobs, live (every ${POLL_MS / 1000} s)`, cols, rows, this.sort, i => {
      this.sort = { col: i, dir: this.sort.col === i ? -this.sort.dir : 1 };
      this.draw();
      const b = document.querySelectorAll('#jobs-table th button')[i];
      if (b) b.focus();
    });
    t.id = 'jobs';
    const box = document.getElementById('jobs-table');
    box.replaceChildren(t);
  },
};

views.job = {
  mount(root, id) {
    this.root = root;
    this.id = id;
    this.armed = false;
    root.append(el('h2', { text: `Job ${id}` }), el('div', { id: 'job-body' }));
  },
  async refresh() {
    const j = await api(`/v1/jobs/${encodeURIComponent(this.id)}`);
    const body = el('div', { id: 'job-body' });
    const facts = el('dl', { class: 'facts' });
    const add = (k, v) => facts.append(el('dt', { text: k }), el('dd', {}, v));
    add('Name', j.name || '—');
    add('Model', j.model);
    add('State', el('span', { id: 'job-state', class: `state state-${j.state}`, text: j.state }));
    add('Message', j.message || '—');
    add('Plan', planText(j.plan));
    add('Progress', `${(100 * j.progress.fraction).toFixed(1)}% (${Math.round(j.progress.tokens_done).toLocaleString()} of ${Math.round(j.progress.tokens_total).toLocaleString()} tokens)`);
    const left = j.progress.tokens_total - j.progress.tokens_done;
    add('ETA', j.state === 'running' && j.plan && j.plan.tokens_per_s ? duration(left / j.plan.tokens_per_s) + ' at the predicted speed' : '—');
    add('Attempts', String(j.attempt));
    add('Submitted', clock(j.submitted_s));
    add('Memory', `predicted ${gib(j.memory.predicted_bytes)} GiB, observed ${gib(j.memory.observed_bytes)} GiB per GPU` +
      (j.plan ? ` of ${gib(j.plan.gpu_memory_bytes)}` : '') + (j.memory.note ? `; ${j.memory.note}` : ''));
    body.append(facts);
    if (j.state === 'queued' || j.state === 'running') {
      const b = el('button', { id: 'cancel', type: 'button', class: 'action danger',
        text: this.armed ? 'Confirm: cancel this job' : 'Cancel job' });
      b.addEventListener('click', async () => {
        if (!this.armed) { this.armed = true; return this.refresh(); }
        this.armed = false;
        try { await api(`/v1/jobs/${encodeURIComponent(this.id)}`, { method: 'DELETE' }); showError(null); }
        catch (e) { showError(e); }
        await this.refresh();
        const s = document.getElementById('job-state');
        if (s) s.focus();
      });
      body.append(el('p', {}, b));
    }
    body.append(el('h3', { text: 'Why these GPUs' }), el('pre', { class: 'why', text: j.why || 'not placed yet' }));
    if (j.options && j.options.length) {
      const t = el('table', { id: 'options' }, el('caption', { text: 'The memory-safe options it had (highlighted: the one it runs on)' }),
        el('thead', {}, el('tr', {}, ...['GPU type', 'GPUs', 'Tokens/s', 'Time left', 'Memory per GPU (GiB)']
          .map((h, i) => el('th', { scope: 'col', class: i ? 'num' : null, text: h })))));
      const tb = el('tbody');
      for (const o of j.options) {
        tb.append(el('tr', { class: o.chosen ? 'chosen' : null }, el('td', { text: o.gpu + (o.chosen ? ' (chosen)' : '') }),
          el('td', { class: 'num', text: o.gpus }), el('td', { class: 'num', text: Math.round(o.tokens_per_s).toLocaleString() }),
          el('td', { class: 'num', text: duration(o.time_left_s) }),
          el('td', { class: 'num', text: `${gib(o.device_bytes)} / ${gib(o.gpu_memory_bytes)}` })));
      }
      t.append(tb);
      body.append(t);
    } else if (j.state !== 'queued' && j.state !== 'running') {
      body.append(el('p', { id: 'options', text: 'The options are shown while a job is queued or running; ' +
        'the reason above says what it ran on and why.' }));
    }
    const r = j.memory.readings || [];
    const t0 = r.length ? r[0].t_s : j.submitted_s;
    const shown = (j.events || []).filter(e => e.kind !== 'submitted');
    // Seconds for a short history, minutes beyond three of them.
    const span = Math.max(0, ...r.map(m => m.t_s - t0), ...shown.map(e => e.t_s - t0));
    const unit = span < 180 ? 1 : 60;
    const x = t => (t - t0) / unit;
    const markers = shown.map(e => ({ x: x(e.t_s), label: e.kind }));
    body.append(el('h3', { text: 'Memory per GPU: predicted and observed' }), lineChart('Peak memory per GPU (GiB)', [
      { name: 'observed', points: r.map(m => [x(m.t_s), m.peak_bytes / GIB]), dots: true },
      { name: 'predicted', points: r.map(m => [x(m.t_s), m.predicted_bytes / GIB]), dash: true },
      { name: 'GPU memory', colour: '#767676', points: j.plan && r.length ? [[0, j.plan.gpu_memory_bytes / GIB], [x(r[r.length - 1].t_s), j.plan.gpu_memory_bytes / GIB]] : [] },
    ], { markers, xRange: [0, unit === 1 ? 60 : 3], xLabel: `${unit === 1 ? 'seconds' : 'minutes'} since the first reading (events marked)`, yLabel: 'GiB',
      xFmt: v => v.toFixed(unit === 1 ? 0 : 1), yFmt: v => v.toFixed(0) }));
    const ev = el('table', { id: 'events' }, el('caption', { text: 'Events (the runtime\'s actions among them)' }),
      el('thead', {}, el('tr', {}, ...['Time', 'Event', 'Detail'].map(h => el('th', { scope: 'col', text: h })))));
    const eb = el('tbody');
    for (const e of j.events || []) eb.append(el('tr', {}, el('td', { text: clock(e.t_s) }), el('td', { text: e.kind }), el('td', { text: e.detail })));
    ev.append(eb);
    body.append(ev, el('h3', { text: 'Log tail' }), await this.logTail());
    const old = this.root.querySelector('#job-body');
    const focused = document.activeElement && document.activeElement.id;
    old.replaceWith(body);
    if (focused === 'cancel') { const b = document.getElementById('cancel'); if (b) b.focus(); }
  },
};

// The last lines of the job's newest run log: what a training script prints may be private, so
// the daemon shows it to the token only.
views.job.logTail = async function logTail() {
  if (!token()) return el('p', { id: 'log', text: 'Enter the token to see the last lines of the run\'s log.' });
  try {
    const r = await api(`/v1/jobs/${encodeURIComponent(this.id)}/log?lines=40`);
    if (!r.file) return el('p', { id: 'log', text: 'No run log (the sim backend runs nothing; a queued job has not run yet).' });
    return el('figure', { id: 'log' }, el('figcaption', { text: `${r.file}, last ${r.lines.length} lines` }),
      el('pre', { class: 'log', tabindex: 0, text: r.lines.join('\n') }));
  } catch (e) { return el('p', { id: 'log', text: `Log: ${e.message}` }); }
};

views.plan = {
  mount(root) {
    this.root = root;
    const form = el('form', { id: 'plan-form', 'aria-label': 'Plan a job' },
      el('div', { class: 'controls' },
        el('label', {}, 'Model (zoo name)', el('input', { name: 'model', value: 'llama-2-7b' })),
        el('label', {}, 'Tokens', el('input', { name: 'tokens', required: true, value: '1e10' })),
        el('label', {}, 'Global batch', el('input', { name: 'global_batch', required: true, value: '512' })),
        el('label', {}, 'Sequence length', el('input', { name: 'seq_len', value: '4096' })),
        el('button', { type: 'submit', class: 'action', text: 'Plan' })),
      el('label', {}, 'or a HuggingFace config.json, pasted', el('textarea', { name: 'config', spellcheck: 'false' })));
    form.addEventListener('submit', async ev => {
      ev.preventDefault();
      const f = new FormData(form);
      let model = f.get('model');
      if (f.get('config').trim()) {
        try { model = JSON.parse(f.get('config')); } catch (e) { return showError(new Error(`config.json: ${e.message}`)); }
      }
      const spec = { model, tokens: Number(f.get('tokens')), global_batch: Number(f.get('global_batch')) };
      if (f.get('seq_len')) spec.seq_len = Number(f.get('seq_len'));
      try { this.draw(await api('/v1/plan', { method: 'POST', body: JSON.stringify(spec) })); showError(null); }
      catch (e) { showError(e); }
    });
    root.append(el('h2', { text: 'Plan a job (nothing is submitted)' }),
      el('p', { text: 'Planning runs on the daemon and needs the token. A pasted config.json replaces the zoo name.' }),
      form, el('div', { id: 'plan-result' }));
  },
  draw(r) {
    const box = el('div', { id: 'plan-result' });
    box.append(el('p', { id: 'explanation', text: r.explanation || '' }));
    const plans = r.plans || [], pareto = r.pareto || [];
    if (plans.length) {
      box.append(planTable('plans', 'Plans, best first', plans));
      box.append(planTable('pareto', 'The Pareto set: no other plan is both faster and on fewer GPUs', pareto));
      const counts = [...new Set(pareto.concat(plans).map(p => p.gpus))].sort((a, b) => a - b);
      box.append(lineChart('Plans: training time against GPUs (the Pareto set joined)', [
        { name: 'Pareto set', points: pareto.map(p => [p.gpus, p.total_s / 3600]), dots: true },
        { name: 'best plans', colour: '#7a4a00', points: plans.map(p => [p.gpus, p.total_s / 3600]), dots: true, noLine: true },
      ], { xLabel: 'GPUs', yLabel: 'hours', xTicks: counts.length > 1 ? counts : undefined,
        xFmt: v => v.toFixed(0), yFmt: v => v.toFixed(1) }));
    }
    document.getElementById('plan-result').replaceWith(box);
  },
};

// A table of plans (the planner's JSON), one row each.
function planTable(id, caption, plans) {
  const t = el('table', { id }, el('caption', { text: caption }),
    el('thead', {}, el('tr', {}, ...['#', 'GPUs', 'Layout', 'Memory per GPU (GiB)', 'Tokens/s', 'MFU', 'Time', 'Cost', 'Pareto']
      .map((h, i) => el('th', { scope: 'col', class: [0, 3, 4, 5, 6, 7].includes(i) ? 'num' : null, text: h })))));
  const tb = el('tbody');
  plans.forEach((p, i) => tb.append(el('tr', {}, el('td', { class: 'num', text: i + 1 }), el('td', { text: `${p.gpus} × ${p.gpu}` }),
    el('td', { text: `TP ${p.tp} PP ${p.pp} DP ${p.dp}, micro-batch ${p.micro_batch}, ZeRO ${p.zero}, recomputation ${p.recompute}, ${p.precision}` }),
    el('td', { class: 'num', text: `${gib(p.device_bytes)} / ${gib(p.gpu_memory_bytes)}` }),
    el('td', { class: 'num', text: Math.round(p.tokens_per_s).toLocaleString() }),
    el('td', { class: 'num', text: `${(100 * p.mfu).toFixed(1)}%` }), el('td', { class: 'num', text: duration(p.total_s) }),
    el('td', { class: 'num', text: p.cost !== undefined ? p.cost.toFixed(0) : '—' }), el('td', { text: p.pareto ? 'yes' : '' }))));
  t.append(tb);
  return t;
}

// ---- routing and polling ----
async function tick() {
  if (!current || !current.refresh) return;
  try { await current.refresh(); } catch (e) { showError(e); }
}
async function health() {
  try {
    const h = await api('/healthz');
    document.getElementById('health').textContent = `frenzyd up, backend ${h.backend}`;
  } catch (e) { document.getElementById('health').textContent = `frenzyd unreachable: ${e.message}`; }
}
function route() {
  const hash = location.hash || '#/jobs';
  const m = hash.match(/^#\/(cluster|jobs|plan|job\/(.+))$/);
  const name = m ? (m[2] ? 'job' : m[1]) : 'jobs';
  const root = document.getElementById('view');
  root.replaceChildren();
  showError(null);
  for (const a of document.querySelectorAll('nav a')) {
    if (a.id === `nav-${name}`) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  current = views[name];
  current.mount(root, m && m[2] ? decodeURIComponent(m[2]) : undefined);
  document.title = `Frenzy: ${name === 'job' ? `job ${m[2]}` : name}`;
  if (timer) clearInterval(timer);
  tick();
  if (name !== 'plan') timer = setInterval(tick, POLL_MS);
}
document.addEventListener('DOMContentLoaded', () => {
  const t = document.getElementById('token');
  t.value = token();
  t.addEventListener('input', () => sessionStorage.setItem('frenzy-token', t.value.trim()));
  window.addEventListener('hashchange', route);
  route();
  health();
  setInterval(health, 10000);
});

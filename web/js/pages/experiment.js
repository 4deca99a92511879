// One experiment: best-so-far, learning curves, parallel coordinates, the
// spaces' priority and share, parameter importance, system-parameter tuning
// per device class, and the trials table. Built once, then updated in place
// on each refresh so the table's filter, sort and page survive live updates.
//
// The first refresh reads every trial and the (thinned) learning curves;
// later ones read only what changed since (?since=<cursor>) and merge it:
// trials by id, curve points by step, a curve marked `replace` (its trial
// lost points: a new attempt) swapped whole. A cursor the server refuses
// (409: another server's) makes the next read a full one.
import { allTrials, ApiError, getJson } from '../api.js';
import { bestSoFar, bestTrial, duration, FINISHED, importance, objective, spaceHistory, tableRows } from '../analysis.js';
import { baseOption, chart, formatDuration, formatNumber, formatTime, PALETTE } from '../charts.js';
import { element, html, setHtml, stateBadge } from '../dom.js';

const ROWS_PER_PAGE = 50;
const CURVE_POINTS = 50000;  // learning-curve points asked of the server, all trials together
const TRIAL_STATES = ['pending', 'leased', 'running', ...FINISHED];

export class ExperimentPage {
  constructor(root, id) {
    this.root = root;
    this.id = id;
    this.table = { state: '', space: '', sort: 'number', descending: false, page: 0 };
    this.parallelSpace = null;
    this.data = null;
    this.cursor = null;  // where the last read stood (server/http/read_cursor.h)
    this.trialsById = new Map();
    this.curvesById = new Map();
    this.downsampled = false;
  }

  wants(type, data) {
    return data.experiment_id === this.id;
  }

  async refresh() {
    const base = `/api/v1/experiments/${this.id}`;
    const [exp, tuning, changes] = await Promise.all([
      getJson(base), getJson(`${base}/system-tuning`), this.readTrialsAndCurves()]);
    const metric = exp.spec.objective.metric;
    const direction = exp.spec.objective.direction ?? 'minimize';
    this.data = { exp, trials: changes.trials, curves: changes.curves, tuning, metric, direction };
    if (!this.root.querySelector('#experiment')) this.build(exp);
    this.drawSummary();
    drawBest(this.data);
    drawCurves(this.data);
    this.drawParallel();
    drawSpaces(this.data);
    drawImportance(this.data);
    drawTuning(this.data);
    this.drawTable();
  }

  // Trials, then curves, read with one cursor (taken before the trials'
  // read, so before the curves' too); everything at first, the changes
  // since the last read after.
  async readTrialsAndCurves() {
    const base = `/api/v1/experiments/${this.id}`;
    if (this.cursor) {
      try {
        const changed = await allTrials(this.id, this.cursor);
        const curves = await getJson(`${base}/measurements?since=${encodeURIComponent(this.cursor)}`);
        this.mergeTrials(changed.trials);
        this.mergeCurves(curves);
        this.cursor = changed.cursor;
        return this.known();
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 409)) throw e;
      }
    }
    const all = await allTrials(this.id);
    const curves = await getJson(`${base}/measurements?max_points=${CURVE_POINTS}`);
    this.trialsById = new Map();
    this.curvesById = new Map();
    this.downsampled = curves.downsampled;
    this.mergeTrials(all.trials);
    this.mergeCurves(curves);
    this.cursor = all.cursor;
    return this.known();
  }

  mergeTrials(trials) {
    for (const t of trials) this.trialsById.set(t.id, t);
  }

  mergeCurves(curves) {
    for (const c of curves.trials) {
      const held = this.curvesById.get(c.trial_id);
      this.curvesById.set(c.trial_id, c.replace || !held ? { trial_id: c.trial_id, steps: c.steps, values: c.values }
                                                         : mergeCurve(held, c));
    }
  }

  // What the drawing reads: trials by number, curves as the server's answer is shaped.
  known() {
    const trials = [...this.trialsById.values()].sort((a, b) => a.number - b.number);
    const list = [...this.curvesById.values()];
    const points = list.reduce((n, c) => n + c.steps.length, 0);
    return { trials, curves: { trials: list, points, downsampled: this.downsampled } };
  }

  build(exp) {
    setHtml(this.root, html`
      <div id="experiment">
        <h1>${exp.name} <span class="muted">#${exp.id}</span></h1>
        <div class="summary" id="summary"></div>
        <div class="grid">
          <div class="panel"><h2>Best so far, by trial</h2><div class="chart" id="best-trials"></div></div>
          <div class="panel"><h2>Best so far, over time</h2><div class="chart" id="best-time"></div></div>
        </div>
        <div class="grid">
          <div class="panel"><h2>Learning curves</h2><div class="chart tall" id="curves"></div>
            <p class="note" id="curves-note"></p></div>
          <div class="panel"><h2>Parameters against the objective
            <select id="parallel-space" aria-label="search space"></select></h2>
            <div class="chart tall" id="parallel"></div></div>
        </div>
        <div class="grid">
          <div class="panel"><h2>Search spaces: priority and share of trials</h2><div class="chart" id="spaces"></div>
            <p class="note">Priority: the space's share of the budget as the ranking set it when each trial was
            created (solid). Share: the fraction of all trials so far that came from the space (dashed).</p></div>
          <div class="panel"><h2>Parameter importance</h2><div class="chart" id="importance"></div>
            <p class="note">Per parameter, the share of the objective's variance explained by the mean objective
            in bins of the parameter's value (fANOVA-style first-order effect, the correlation ratio η²), over
            completed trials. Numbers go into up to 10 equal-count bins, categories into one bin each. No
            interactions; noisy with few trials.</p></div>
        </div>
        <div class="panel" style="margin-bottom:16px"><h2>System parameters per device class</h2>
          <div class="chart" id="tuning"></div><p class="note" id="tuning-note"></p></div>
        <div class="panel"><h2>Trials</h2>
          <div class="toolbar">
            <label>state <select id="filter-state"><option value="">all</option>
              ${TRIAL_STATES.map((s) => html`<option>${s}</option>`)}</select></label>
            <label>space <select id="filter-space"><option value="">all</option>
              ${exp.spaces.map((s) => html`<option>${s}</option>`)}</select></label>
            <span class="muted" id="table-count"></span>
          </div>
          <table id="trials"><thead></thead><tbody></tbody></table>
          <div class="pager"><button data-page="-1">previous</button><span id="table-page"></span>
            <button data-page="1">next</button></div>
        </div>
      </div>`);
    const select = this.root.querySelector('#parallel-space');
    setHtml(select, html`${exp.spaces.map((s) => html`<option>${s}</option>`)}`);
    select.onchange = () => {
      this.parallelSpace = select.value;
      this.drawParallel();
    };
    this.root.querySelector('#filter-state').onchange = (e) => this.setTable({ state: e.target.value, page: 0 });
    this.root.querySelector('#filter-space').onchange = (e) => this.setTable({ space: e.target.value, page: 0 });
    this.root.querySelector('#trials thead').onclick = (e) => {
      const sort = e.target.closest('[data-sort]')?.dataset.sort;
      if (!sort) return;
      const descending = this.table.sort === sort ? !this.table.descending : false;
      this.setTable({ sort, descending, page: 0 });
    };
    this.root.querySelector('.pager').onclick = (e) => {
      const step = e.target.closest('[data-page]')?.dataset.page;
      if (step) this.setTable({ page: this.table.page + Number(step) });
    };
  }

  setTable(change) {
    Object.assign(this.table, change);
    this.drawTable();
  }

  drawSummary() {
    const { exp, trials, metric, direction } = this.data;
    const best = bestTrial(trials, metric, direction);
    const n = exp.trials;
    const budget = exp.spec.budget?.max_trials ?? 100;
    setHtml(this.root.querySelector('#summary'), html`
      <div><span class="muted">state</span>${stateBadge(exp.state)}</div>
      <div><span class="muted">trials</span><b>${n.total} / ${budget}</b></div>
      <div><span class="muted">completed · pruned · failed</span><b>${n.completed} · ${n.pruned} · ${n.failed}</b></div>
      <div><span class="muted">running</span><b>${n.running + n.leased}</b></div>
      <div><span class="muted">best ${metric} (${direction})</span>
        <b id="best-value">${best ? formatNumber(objective(best, metric)) : '–'}</b></div>
      <div><span class="muted">best trial</span><b>${best ? `#${best.number} ${best.space ?? ''}` : '–'}</b></div>
      <div><span class="muted">sampler · early stopping</span>
        <b>${exp.spec.algorithm?.sampler ?? 'tpe'} · ${exp.spec.early_stopping?.rule ?? 'none'}</b></div>
      <div><span class="muted">started</span><b>${formatTime(exp.created_ms)}</b></div>`);
  }

  drawParallel() {
    const { exp, trials, metric } = this.data;
    const space = this.parallelSpace ?? exp.spaces[0];
    this.root.querySelector('#parallel-space').value = space;
    const specParams = (exp.spec.spaces ?? []).find((s) => s.name === space)?.params ?? {};
    const done = trials.filter((t) => t.space === space && t.state === 'completed' && objective(t, metric) !== null);
    const names = [...new Set(done.flatMap((t) => Object.keys(t.params)))].sort();
    const axes = names.map((name, dim) => {
      const values = done.map((t) => t.params[name]).filter((v) => v !== undefined);
      if (values.every((v) => typeof v === 'number')) {
        const log = specParams[name]?.log && values.every((v) => v > 0);
        return { dim, name, type: log ? 'log' : 'value', scale: true };
      }
      return { dim, name, type: 'category', data: [...new Set(values.map(String))].sort() };
    });
    const objectiveValues = done.map((t) => objective(t, metric));
    axes.push({ dim: names.length, name: metric, type: 'value', scale: true, nameTextStyle: { fontWeight: 'bold' } });
    const data = done.map((t) => [
      ...names.map((n, i) => (t.params[n] === undefined ? '-' : axes[i].type === 'category' ? String(t.params[n]) : t.params[n])),
      objective(t, metric)]);
    chart(this.root.querySelector('#parallel'), 'experiment.parallel').setOption({
      ...baseOption,
      parallel: { left: 40, right: 110, top: 40, bottom: 30 },
      parallelAxis: axes,
      visualMap: {
        type: 'continuous', dimension: names.length, calculable: true, right: 0, top: 'middle', itemHeight: 120,
        min: objectiveValues.length ? Math.min(...objectiveValues) : 0,
        max: objectiveValues.length ? Math.max(...objectiveValues) : 1,
        inRange: { color: ['#1a9b5c', '#e8c33d', '#c2410c'] },
        formatter: (v) => formatNumber(v, 3),
        inverse: this.data.direction === 'maximize',
      },
      series: [{ type: 'parallel', name: space, data, progressive: 1000, lineStyle: { width: 1, opacity: 0.4 } }],
    }, true);
  }

  drawTable() {
    const { trials, metric } = this.data;
    const rows = tableRows(trials, { ...this.table, metric });
    const pages = Math.max(1, Math.ceil(rows.length / ROWS_PER_PAGE));
    this.table.page = Math.min(Math.max(0, this.table.page), pages - 1);
    const shown = rows.slice(this.table.page * ROWS_PER_PAGE, (this.table.page + 1) * ROWS_PER_PAGE);
    const arrow = (key) => (this.table.sort === key ? (this.table.descending ? ' ▼' : ' ▲') : '');
    const th = (key, label) => html`<th class="sortable" data-sort="${key}">${label}${arrow(key)}</th>`;
    setHtml(this.root.querySelector('#trials thead'), html`<tr>${th('number', '#')}${th('state', 'state')}
      ${th('space', 'space')}${th('objective', metric)}<th>params</th><th>system</th>${th('started', 'started')}
      ${th('duration', 'duration')}<th>reason</th></tr>`);
    setHtml(this.root.querySelector('#trials tbody'), html`${shown.map((t) => html`<tr data-number="${t.number}">
      <td class="num">${t.number}</td><td>${stateBadge(t.state)}</td><td>${t.space ?? ''}</td>
      <td class="num">${formatNumber(objective(t, metric))}</td>
      <td><code>${compact(t.params)}</code></td><td><code>${compact(t.system)}</code></td>
      <td>${formatTime(t.started_ms)}</td><td class="num">${formatDuration(duration(t))}</td>
      <td class="muted">${t.reason}</td></tr>`)}`);
    this.root.querySelector('#table-count').textContent = `${rows.length} of ${trials.length} trials`;
    this.root.querySelector('#table-page').textContent = `page ${this.table.page + 1} of ${pages}`;
    const [prev, next] = this.root.querySelectorAll('.pager button');
    prev.disabled = this.table.page === 0;
    next.disabled = this.table.page >= pages - 1;
  }
}

// A curve with another's points added, by step (a repeated step takes the new value).
function mergeCurve(held, add) {
  const byStep = new Map(held.steps.map((s, i) => [s, held.values[i]]));
  add.steps.forEach((s, i) => byStep.set(s, add.values[i]));
  const steps = [...byStep.keys()].sort((a, b) => a - b);
  return { trial_id: held.trial_id, steps, values: steps.map((s) => byStep.get(s)) };
}

function compact(obj) {
  return Object.entries(obj ?? {}).map(([k, v]) => `${k}=${typeof v === 'number' ? formatNumber(v) : v}`).join(' ');
}

function drawBest({ trials, metric, direction }) {
  const best = bestSoFar(trials, metric, direction);
  const done = trials.filter((t) => t.state === 'completed' && objective(t, metric) !== null);
  const option = (x, points, xAxis) => ({
    ...baseOption,
    tooltip: { trigger: 'axis' },
    legend: { top: 0 },
    xAxis, yAxis: { type: 'value', name: metric, scale: true },
    series: [
      { name: 'trial', type: 'scatter', large: true, symbolSize: done.length > 1000 ? 3 : 6, itemStyle: { color: '#9ca3af', opacity: 0.6 },
        data: done.map((t) => [x(t), objective(t, metric)]) },
      { name: 'best so far', type: 'line', step: 'end', showSymbol: false, lineStyle: { width: 2 }, data: points },
    ],
  });
  chart(document.getElementById('best-trials'), 'experiment.bestByTrial')
    .setOption(option((t) => t.number, best.byTrial, { type: 'value', name: 'trial' }), true);
  chart(document.getElementById('best-time'), 'experiment.bestByTime')
    .setOption(option((t) => t.finished_ms, best.byTime,
                      { type: 'time', axisLabel: { hideOverlap: true } }), true);
}

function drawCurves({ trials, curves, metric }) {
  const byId = new Map(trials.map((t) => [t.id, t]));
  const groups = { completed: [], pruned: [], other: [] };
  const prunedEnds = [];
  // 'lines' series do not widen the axes: their extent is set here.
  const extent = { x: [Infinity, -Infinity], y: [Infinity, -Infinity] };
  const widen = (e, v) => {
    e[0] = Math.min(e[0], v);
    e[1] = Math.max(e[1], v);
  };
  for (const c of curves.trials) {
    c.steps.forEach((s) => widen(extent.x, s));
    c.values.forEach((v) => widen(extent.y, v));
    const state = byId.get(c.trial_id)?.state;
    const coords = c.steps.map((s, i) => [s, c.values[i]]);
    if (coords.length === 1) coords.push(coords[0]);  // ECharts' large polylines need two points
    (groups[state] ?? groups.other).push({ coords });
    if (state === 'pruned') prunedEnds.push(coords[coords.length - 1]);
  }
  const lines = (name, data, color, opacity) => ({
    name, type: 'lines', coordinateSystem: 'cartesian2d', polyline: true, large: true, largeThreshold: 500,
    data, lineStyle: { color, width: 1, opacity },
  });
  chart(document.getElementById('curves'), 'experiment.curves').setOption({
    ...baseOption,
    legend: { top: 0, data: ['completed', 'pruned', 'running and other', 'pruned at'] },
    xAxis: { type: 'value', name: 'step', ...axisRange(extent.x) },
    yAxis: { type: 'value', name: metric, ...axisRange(extent.y, 0.05) },
    series: [
      lines('completed', groups.completed, PALETTE[0], 0.35),
      lines('pruned', groups.pruned, PALETTE[1], 0.35),
      lines('running and other', groups.other, PALETTE[4], 0.6),
      { name: 'pruned at', type: 'scatter', symbol: 'triangle', symbolSize: 6, large: true,
        itemStyle: { color: PALETTE[1] }, data: prunedEnds },
    ],
  }, true);
  document.getElementById('curves-note').textContent =
    `${curves.trials.length} trials, ${curves.points} points` +
    (curves.downsampled ? ' (long curves thinned by the server, first and last steps kept)' : '') +
    `; ${prunedEnds.length} pruned, marked ▲ where they stopped.`;
}

// Axis bounds for [lo, hi] (none when empty), with a margin of `pad` of the span.
function axisRange([lo, hi], pad = 0) {
  if (!(lo <= hi)) return {};
  const margin = (hi - lo) * pad;
  return { min: lo - margin, max: hi + margin, axisLabel: { formatter: (v) => formatNumber(v, 3) } };
}

function drawSpaces({ exp, trials }) {
  const history = spaceHistory(trials, exp.spaces);
  const series = exp.spaces.flatMap((s, i) => [
    { name: `${s} priority`, type: 'line', step: 'end', showSymbol: false, color: PALETTE[i % PALETTE.length],
      data: history[s].priority },
    { name: `${s} share`, type: 'line', showSymbol: false, color: PALETTE[i % PALETTE.length],
      lineStyle: { type: 'dashed' }, data: history[s].share },
  ]);
  chart(document.getElementById('spaces'), 'experiment.spaces').setOption({
    ...baseOption,
    tooltip: { trigger: 'axis', valueFormatter: (v) => formatNumber(v, 3) },
    legend: { top: 0, type: 'scroll' },
    xAxis: { type: 'value', name: 'trial', min: 'dataMin', max: 'dataMax' },
    yAxis: { type: 'value', min: 0, max: 1 },
    series,
  }, true);
}

function drawImportance({ trials, metric }) {
  const rows = importance(trials, metric);
  chart(document.getElementById('importance'), 'experiment.importance').setOption({
    ...baseOption,
    tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, valueFormatter: (v) => formatNumber(v, 3) },
    xAxis: { type: 'value', name: 'η²', min: 0, max: 1 },
    yAxis: { type: 'category', inverse: true, data: rows.map((r) => `${r.param} (${r.trials})`) },
    series: [{ type: 'bar', name: 'importance', data: rows.map((r) => r.importance),
               label: { show: true, position: 'right', formatter: ({ value }) => formatNumber(value, 2) } }],
  }, true);
}

// Measured samples/s against the tuned (throughput-only) parameters' values,
// a line per device class, workload and bucket of the searched batch size;
// the point trials of that bucket start from is marked (green, ✓). See
// dashboard::SystemTuning in server/http/dashboard.h for the data.
function drawTuning({ tuning }) {
  const xs = new Map();  // x label -> canonical key, for a stable order
  for (const w of tuning.workloads) {
    for (const c of w.device_classes) {
      for (const b of c.buckets) for (const p of b.points) xs.set(compact(p.tunables), JSON.stringify(p.tunables));
    }
  }
  // Numbers in their order (threads 2 before 10).
  const labels = [...xs.keys()].sort((a, b) => xs.get(a).localeCompare(xs.get(b), undefined, { numeric: true }));
  const series = [];
  for (const w of tuning.workloads) {
    for (const c of w.device_classes) {
      for (const b of c.buckets) {
        const chosen = b.chosen === null ? null : compact(b.chosen);
        const batch = b.batch_size === null ? 'any batch' : `batch ${b.batch_size}–${2 * b.batch_size - 1}`;
        const at = new Map(b.points.map((p) => [compact(p.tunables), p]));
        series.push({
          type: 'line', name: `${c.device_class} · ${w.workload} · ${batch}`, connectNulls: true,
          data: labels.map((x) => {
            const p = at.get(x);
            if (!p) return null;
            const isChosen = x === chosen;
            return { value: p.samples_per_sec, observations: p.observations, deviceClass: c.device_class,
                     workload: w.workload, batch, setting: x, isChosen,
                     symbolSize: isChosen ? 14 : 6,
                     itemStyle: isChosen ? { color: '#1a9b5c' } : undefined,
                     label: isChosen ? { show: true, formatter: '✓', position: 'top' } : undefined };
          }),
        });
      }
    }
  }
  const el = document.getElementById('tuning');
  el.style.height = series.length === 0 ? '0' : `${Math.max(240, 22 * series.length + 220)}px`;
  chart(el, 'experiment.tuning').setOption({
    ...baseOption,
    tooltip: { trigger: 'item', formatter: tuningTooltip },
    legend: { type: 'scroll', bottom: 0, formatter: (name) => name },
    grid: { left: 70, right: 30, top: 30, bottom: 22 * Math.min(series.length, 6) + 40 },
    xAxis: { type: 'category', name: (tuning.workloads[0]?.tunable ?? []).join(', '), data: labels },
    yAxis: { type: 'value', name: 'samples/s' },
    series,
  }, true);
  chart(el, 'experiment.tuning').resize();
  document.getElementById('tuning-note').textContent = series.length === 0
    ? 'No speed measured yet: workers report samples/s per system setting as they train (ask/tell clients report no device).'
    : 'Mean measured samples/s against the co-tuned parameters, a line per device class, workload and searched ' +
      'batch size; ✓ (green) is what later trials of that batch size start from on that class (seen at least twice).';
}

// A DOM node, not markup: the device class comes from the worker's CPU or GPU
// name, the workload from the command's argv[0] and the space's name, the
// setting from the spec, and ECharts would put a returned string into the
// page as HTML (see web/js/dom.js).
function tuningTooltip({ data }) {
  return element('div', null,
    element('div', null, element('b', null, data.deviceClass)),
    element('div', null, data.workload),
    element('div', null, data.batch),
    element('div', null, data.setting || '(no system parameters)', data.isChosen ? ' ✓' : ''),
    element('div', null, `${formatNumber(data.value)} samples/s, ${data.observations} observations`));
}

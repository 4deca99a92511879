// One experiment: best-so-far, learning curves, parallel coordinates, the
// spaces' priority and share, parameter importance, system-parameter tuning
// per device class, and the trials table. Built once, then updated in place
// on each refresh so the table's filter, sort and page survive live updates.
//
// The first refresh reads every trial (keyset pages read at once), then the
// (thinned) learning curves, drawing the summary, the table and then the
// charts of trials while the server thins the curves. Later ones read only
// what changed since (?since=<cursor>) and merge it (TrialSet and CurveSet
// in analysis.js). A cursor the server refuses (409: another server's)
// makes the next read a full one.
//
// A live refresh redraws only what its changes touch (trialChanges in
// analysis.js): a report on a running trial, the common update, changes its
// learning curve, the table and the summary, not best-so-far, parallel
// coordinates, the spaces or importance, which draw from completed trials
// and from which trials exist. A chart that is redrawn is given only its
// series' data (ECharts merges it into what it holds), and the learning
// curves only the series of the kind of trial that changed (CurvesChart).
//
// Every chart with nothing to draw says why (chartMessage). A click on a
// table row or on a learning curve opens the trial's page (pages/trial.js).
import { allTrials, allTrialsAtOnce, ApiError, getJson, getJsonOrNull } from '../api.js';
import {
  bestSoFar, bestTrial, CurveSet, dataRange, deviceClassColors, FINISHED, importanceView, MIN_IMPORTANCE_TRIALS,
  objective, objectivesOf, paramAxis, paretoView, spaceHistory, specParams, tableRows, timeRange, trainMs, trialChanges, TrialSet,
} from '../analysis.js';
import {
  baseOption, chart, chartMessage, compact, formatDuration, formatNumber, formatTime, GRID, PALETTE, seriesData,
  shownValue,
} from '../charts.js';
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
    this.el = null;  // this page's element under root, once built
    // Where the last reads stood (server/http/read_cursor.h): one cursor per
    // route, each taken before its own read, so the two reads can run at once.
    this.cursors = null;  // { trials, curves }
    this.trials = new TrialSet();
    this.curves = new CurveSet();
    this.downsampled = false;
    this.best = null;          // the best completed trial
    this.curvesChart = null;   // what the learning-curve chart draws (CurvesChart)
    this.curvesLog = false;    // the learning curves' value axis on a log scale
    this.tuningJson = null;    // the system tuning last drawn, as JSON
    this.markup = new WeakMap();  // element -> the markup or text this page last gave it
  }

  wants(type, data) {
    return data.experiment_id === this.id;
  }

  async refresh() {
    const base = `/api/v1/experiments/${this.id}`;
    const experiment = getJson(base);
    const tuning = getJson(`${base}/system-tuning`);
    tuning.catch(() => {});  // awaited later, or not at all when the trials' read fails first
    const drawn = this.cursors && this.el && this.root.contains(this.el) &&
      await this.refreshChanges(experiment, tuning);
    if (!drawn) await this.refreshAll(experiment, tuning);
  }

  // Reads what changed since the last reads and redraws what that touches.
  // Answers false, having drawn nothing, when the server refused the
  // cursors (409: another server's): read everything again.
  async refreshChanges(experiment, tuningRead) {
    const base = `/api/v1/experiments/${this.id}`;
    let read;
    try {
      read = await Promise.all([
        experiment, tuningRead, allTrials(this.id, this.cursors.trials),
        getJson(`${base}/measurements?since=${encodeURIComponent(this.cursors.curves)}`)]);
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) return false;
      throw e;
    }
    const [exp, tuning, trials, curves] = read;
    this.cursors = { trials: trials.cursor, curves: curves.cursor };
    const trialsChanged = this.trials.merge(trials.trials);
    const curvesChanged = this.curves.merge(curves.trials);
    this.setData(exp, tuning);
    const { metric } = this.data;
    const changed = trialChanges(trialsChanged, metric);
    if (changed.outcomes.size) this.best = bestTrial(this.trials.list, metric, this.data.direction, this.data.constraints);
    // The charts before any change to the page's markup: ECharts reads the
    // page's layout as it draws, which would make the browser lay out the
    // changed page once per chart.
    if (changed.outcomes.size) drawBest(this.data, false);
    if (changed.outcomes.size) this.drawFront();
    if (curvesChanged.length || changed.states) {
      this.curvesChart.draw(this.data, [...curvesChanged, ...trialsChanged.map((c) => c.after.id)]);
    }
    if (changed.outcomes.has(this.parallelSpace ?? exp.spaces[0])) this.drawParallel();
    if (changed.spaces) drawSpaces(this.data, false);
    if (changed.outcomes.size) drawImportance(this.data, false);
    this.drawTuning();
    if (curvesChanged.length || changed.states) this.drawCurvesNote();
    this.drawSummary();
    // A report changes what the table shows of a trial without final
    // metrics (its last report), whether or not the trial came in the read.
    if (changed.any || curvesChanged.length) this.drawTable();
    return true;
  }

  // Reads everything and draws the page anew: the trials first, then the
  // curves, whose read (the server reads every measurement to thin them)
  // runs while the summary, the table and the charts of trials are drawn.
  // One after the other, not at once: on a small machine the two reads only
  // slow each other down, while the server's work on the curves and the
  // page's drawing run side by side.
  async refreshAll(experiment, tuningRead) {
    const base = `/api/v1/experiments/${this.id}`;
    const [exp, trials] = await Promise.all([
      experiment, allTrialsAtOnce(this.id, experiment.then((e) => e.trials.total))]);
    const curvesRead = getJson(`${base}/measurements?max_points=${CURVE_POINTS}`);
    curvesRead.catch(() => {});  // awaited below; a failure before that is the trials' to report
    this.trials = new TrialSet();
    this.trials.merge(trials.trials);
    this.setData(exp, null);
    this.best = bestTrial(this.trials.list, this.data.metric, this.data.direction, this.data.constraints);
    if (!this.el || !this.root.contains(this.el)) this.build(exp);
    this.drawSummary();
    this.drawTable();
    // Let the summary and the table show while the charts are drawn.
    await nextFrame();
    if (!this.root.contains(this.el)) return;
    drawBest(this.data, true);
    this.drawFront();
    this.drawParallel();
    drawSpaces(this.data, true);
    drawImportance(this.data, true);
    const [curves, tuning] = await Promise.all([curvesRead, tuningRead]);
    if (!this.root.contains(this.el)) return;
    this.curves = new CurveSet();
    this.curves.merge(curves.trials);
    this.downsampled = curves.downsampled;
    this.setData(exp, tuning);
    this.curvesChart = new CurvesChart(this.el.querySelector('#curves'), this.curvesLog,
                                       (number) => this.openTrial(number));
    this.curvesChart.draw(this.data, null);
    this.tuningJson = null;
    this.drawTuning();
    this.drawCurvesNote();
    this.cursors = { trials: trials.cursor, curves: curves.cursor };
  }

  // What the drawing reads, as the last reads left it.
  setData(exp, tuning) {
    // With several objectives the one-objective charts follow the first.
    const objectives = objectivesOf(exp.spec);
    this.data = {
      exp, tuning, trials: this.trials.list, trialsById: this.trials.byId, curves: this.curves.byId,
      metric: objectives[0]?.metric, direction: objectives[0]?.direction ?? 'minimize',
      objectives, constraints: exp.spec.constraints ?? [],
    };
  }

  drawTuning() {
    const json = JSON.stringify(this.data.tuning);
    if (json === this.tuningJson) return;
    drawTuning(this.data);
    this.tuningJson = json;
  }

  drawCurvesNote() {
    this.setText(this.el.querySelector('#curves-note'), this.curvesChart.note(this.downsampled));
    // A log axis cannot show a value at or below 0.
    const box = this.el.querySelector('#curves-log');
    const positive = this.curvesChart.allPositive();
    box.disabled = !positive && !box.checked;
    box.parentElement.title = positive ? 'the metric on a log scale'
      : 'some reported values are 0 or below: a log scale cannot show them';
  }

  openTrial(number) {
    location.hash = `#/experiments/${this.id}/trials/${number}`;
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
        ${objectivesOf(exp.spec).length > 1 ? html`<div class="grid" id="front-row">
          <div class="panel"><h2>Pareto front
            <select id="front-x" aria-label="objective across"></select>
            <select id="front-y" aria-label="objective up"></select></h2>
            <div class="chart tall" id="front"></div><p class="note" id="front-note"></p>
            <p class="note" id="front-classes"></p></div>
          <div class="panel"><h2>Hypervolume over time</h2><div class="chart tall" id="hypervolume"></div>
            <p class="note">The area the feasible completed trials dominate in the two objectives shown, against
            the worst feasible value of each: it grows each time a trial moves the front.</p></div>
        </div>` : ''}
        <div class="grid">
          <div class="panel"><h2>Learning curves <label class="toggle"><input type="checkbox" id="curves-log"
            ${this.curvesLog ? 'checked' : ''}> log scale</label></h2><div class="chart tall" id="curves"></div>
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
            <p class="note">Per parameter, the share of the objective's variance it predicts alone, out of sample:
            each completed trial's objective predicted from the others' nearest by that parameter's value (by
            the others with the same choice for a category), leaving it out (cross-validated R²). A parameter the
            objective does not depend on scores near 0. No interactions; shown from ${MIN_IMPORTANCE_TRIALS} completed
            trials on.</p></div>
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
    this.el = this.root.querySelector('#experiment');
    const objectives = objectivesOf(exp.spec);
    if (objectives.length > 1) {
      this.frontPair ??= [0, 1];
      for (const [k, id] of [[0, '#front-x'], [1, '#front-y']]) {
        const pick = this.root.querySelector(id);
        setHtml(pick, html`${objectives.map((o, i) => html`<option value="${String(i)}">${o.metric}</option>`)}`);
        pick.value = String(this.frontPair[k]);
        pick.onchange = () => {
          this.frontPair[k] = Number(pick.value);
          this.drawFront();
        };
      }
    }
    const select = this.root.querySelector('#parallel-space');
    setHtml(select, html`${exp.spaces.map((s) => html`<option>${s}</option>`)}`);
    select.onchange = () => {
      this.parallelSpace = select.value;
      this.drawParallel();
    };
    this.root.querySelector('#filter-state').onchange = (e) => this.setTable({ state: e.target.value, page: 0 });
    this.root.querySelector('#filter-space').onchange = (e) => this.setTable({ space: e.target.value, page: 0 });
    this.root.querySelector('#curves-log').onchange = (e) => {
      this.curvesLog = e.target.checked;
      this.curvesChart?.setLog(this.curvesLog);
    };
    this.root.querySelector('#trials tbody').onclick = (e) => {
      const number = e.target.closest('tr[data-number]')?.dataset.number;
      if (number !== undefined) this.openTrial(number);
    };
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

  // setHtml and textContent, unless the element holds that already: a
  // refresh that leaves the summary or the table's page as it was does not
  // make the browser parse and lay them out again.
  setHtml(el, markup) {
    const text = String(markup);
    if (this.markup.get(el) === text) return;
    this.markup.set(el, text);
    setHtml(el, markup);
  }

  setText(el, text) {
    if (this.markup.get(el) === text) return;
    this.markup.set(el, text);
    el.textContent = text;
  }

  setTable(change) {
    Object.assign(this.table, change);
    this.drawTable();
  }

  drawSummary() {
    const { exp, metric, direction } = this.data;
    const n = exp.trials;
    // Ended with no completed trial: the server's partial best (the best
    // report of any trial), read once; a running experiment is not asked.
    if (!this.best && exp.state !== 'running' && n.total && this.partialBest === undefined) {
      this.partialBest = null;
      getJsonOrNull(`/api/v1/experiments/${this.id}/best`).then((b) => {
        this.partialBest = b;
        if (b && this.el && this.root.contains(this.el)) this.drawSummary();
      }, () => {});
    }
    const partial = !this.best && this.partialBest ? this.partialBest : null;
    const best = this.best ?? (partial && { ...partial, final_metrics: partial.best_metrics });
    const budget = exp.spec.budget?.max_trials ?? 100;
    this.setHtml(this.root.querySelector('#summary'), html`
      <div><span class="muted">state</span>${stateBadge(exp.state)}</div>
      <div><span class="muted">trials</span><b>${n.total} / ${budget}</b></div>
      <div><span class="muted">completed · pruned · failed</span><b>${n.completed} · ${n.pruned} · ${n.failed}</b></div>
      <div><span class="muted">running</span><b>${n.running + n.leased}</b></div>
      <div><span class="muted">best ${metric} (${direction})</span>
        <b id="best-value">${best ? formatNumber(objective(best, metric)) : '–'}</b></div>
      <div><span class="muted">best trial</span><b>${best ? `#${best.number} ${best.space ?? ''}` : '–'}${
        partial ? ` (partial: ${partial.state}, step ${partial.best_step})` : ''}</b></div>
      <div><span class="muted">sampler · early stopping</span>
        <b>${exp.spec.algorithm?.sampler ?? 'tpe'} · ${exp.spec.early_stopping?.rule ?? 'none'}</b></div>
      <div><span class="muted">started</span><b>${formatTime(exp.created_ms)}</b></div>`);
  }

  // Several objectives: the completed trials in the two chosen objectives,
  // the feasible front set apart from the dominated and the infeasible
  // ones, and the front's hypervolume as trials completed. A click opens a
  // trial. Where the trials ran on devices of ours, each point has the
  // colour of the device class that trained it longest (a class per colour,
  // listed under the chart) and the three kinds differ by shape and size:
  // which devices the front's models came from, at a glance.
  drawFront() {
    const { trials, objectives, constraints } = this.data;
    const el = this.el?.querySelector('#front');
    if (!el || objectives.length < 2) return;
    const [i, j] = this.frontPair;
    const view = paretoView(trials, objectives, constraints, [i, j]);
    const colors = deviceClassColors([...view.front, ...view.dominated, ...view.infeasible].map((e) => e.trial), PALETTE);
    const point = (e) => {
      const deviceClass = e.trial.device_class ?? null;
      const color = colors.get(deviceClass);
      return { value: [e.x, e.y], number: e.trial.number, space: e.trial.space, reasons: e.reasons, deviceClass,
               ...(color ? { itemStyle: { color } } : {}) };
    };
    // With classes the kinds' own colour is a neutral one (the legend's).
    const kindColor = (own) => (colors.size ? '#6b7280' : own);
    const series = [
      { id: 'front', name: 'on the front', color: kindColor(PALETTE[0]), symbolSize: 11,
        border: colors.size ? '#111827' : undefined,
        data: view.front.map(point).sort((a, b) => a.value[0] - b.value[0]) },
      { id: 'dominated', name: 'dominated', color: kindColor('#9ca3af'), symbolSize: 6, opacity: colors.size ? 0.55 : 1,
        data: view.dominated.map(point) },
      { id: 'infeasible', name: 'infeasible', color: kindColor(PALETTE[4]), symbol: 'triangle', symbolSize: 8,
        data: view.infeasible.map(point) },
    ].map(({ color, border, opacity, ...rest }) => ({
      type: 'scatter', itemStyle: { color, opacity, ...(border ? { borderColor: border, borderWidth: 1.5 } : {}) },
      ...rest }));
    this.drawDeviceClassKey(colors);
    const axis = (k) => ({ type: 'value', name: `${objectives[k].metric} (${objectives[k].direction === 'maximize'
      ? 'max' : 'min'})`, scale: true, nameLocation: 'middle', nameGap: 28 });
    const c = chart(el, 'experiment.front');
    c.setOption({
      ...baseOption,
      legend: { top: 0 },
      tooltip: { trigger: 'item', confine: true, formatter: ({ data }) => frontTooltip(data, objectives[i], objectives[j]) },
      xAxis: axis(i), yAxis: axis(j), series,
    }, true);
    c.off('click');
    c.on('click', ({ data }) => data?.number !== undefined && this.openTrial(data.number));
    const done = view.front.length + view.dominated.length + view.infeasible.length;
    chartMessage(el, done ? null : 'no completed trial yet: each completed trial is a dot here');
    this.setText(this.el.querySelector('#front-note'), done
      ? `${view.front.length} on the front of ${view.front.length + view.dominated.length} feasible, ${done} completed`
        + (objectives.length > 2 ? ` (the front in all ${objectives.length} objectives, drawn in two)` : '')
      : '');
    const hvEl = this.el.querySelector('#hypervolume');
    chart(hvEl, 'experiment.hypervolume').setOption({
      ...baseOption,
      tooltip: { trigger: 'axis' },
      xAxis: { type: 'time', axisLabel: { hideOverlap: true, ...INWARD_LABELS },
               ...(timeRange(view.hypervolume.map(([t]) => t)) ?? {}) },
      yAxis: { type: 'value', name: 'hypervolume', scale: true },
      series: [{ id: 'hv', name: 'hypervolume', type: 'line', step: 'end', showSymbol: false,
                 data: seriesData(view.hypervolume) }],
    }, true);
    chartMessage(hvEl, view.hypervolume.length ? null : 'no feasible completed trial yet');
  }

  // The front's device classes and their colours, under its chart.
  drawDeviceClassKey(colors) {
    const key = this.el.querySelector('#front-classes');
    if (!key) return;
    const items = [...colors].map(([name, color]) => {
      const swatch = element('span', 'swatch');
      swatch.style.background = color;
      return element('span', 'device-class', swatch, name);
    });
    key.replaceChildren(...(items.length ? ['device class that trained it: ', ...items] : []));
  }

  drawParallel() {
    const { exp, trials, metric } = this.data;
    const space = this.parallelSpace ?? exp.spaces[0];
    const select = this.root.querySelector('#parallel-space');
    if (select.value !== space) select.value = space;
    const defs = specParams((exp.spec.spaces ?? []).find((s) => s.name === space));
    const done = trials.filter((t) => t.space === space && t.state === 'completed' && objective(t, metric) !== null);
    // Every parameter of the space, drawn by a trial or not yet.
    const names = [...new Set([...Object.keys(defs), ...done.flatMap((t) => Object.keys(t.params))])].sort();
    // Parameters on the space's bounds from the spec (not the values' nice
    // rounding: 64-256 was drawn 10-10,000), the objective on its values' range.
    const axes = names.map((name, dim) => ({
      dim, name, ...paramAxis(defs[name], done.map((t) => t.params[name]).filter((v) => v !== undefined)),
    }));
    const objectiveValues = done.map((t) => objective(t, metric));
    axes.push({ dim: names.length, name: metric, type: 'value', ...(dataRange(objectiveValues) ?? { scale: true }),
                axisLabel: { formatter: (v) => formatNumber(v, 3) }, nameTextStyle: { fontWeight: 'bold' } });
    const data = seriesData(done.map((t) => [
      ...names.map((n, i) => (t.params[n] === undefined ? '-' : axes[i].type === 'category' ? String(t.params[n]) : t.params[n])),
      objective(t, metric)]));
    chart(this.root.querySelector('#parallel'), 'experiment.parallel').setOption({
      ...baseOption,
      parallel: { left: 40, right: 150, top: 40, bottom: 30 },  // right: the objective axis's labels, then the colour scale
      parallelAxis: axes,
      visualMap: {
        type: 'continuous', dimension: names.length, calculable: true, right: 0, top: 'middle', itemHeight: 120,
        min: objectiveValues.length ? objectiveValues.reduce((a, b) => Math.min(a, b)) : 0,
        max: objectiveValues.length ? objectiveValues.reduce((a, b) => Math.max(a, b)) : 1,
        inRange: { color: ['#1a9b5c', '#e8c33d', '#c2410c'] },
        formatter: (v) => formatNumber(v, 3),
        inverse: this.data.direction === 'maximize',
      },
      series: [{ type: 'parallel', name: space, data, progressive: 1000, lineStyle: { width: 1, opacity: 0.4 } }],
    }, true);
    chartMessage(this.root.querySelector('#parallel'), done.length ? null
      : `no completed trial in space ${space} yet: each completed trial is a line here`);
  }

  drawTable() {
    const { trials, metric } = this.data;
    const rows = tableRows(trials, { ...this.table, metric, curves: this.curves.byId });
    const pages = Math.max(1, Math.ceil(rows.length / ROWS_PER_PAGE));
    this.table.page = Math.min(Math.max(0, this.table.page), pages - 1);
    const shown = rows.slice(this.table.page * ROWS_PER_PAGE, (this.table.page + 1) * ROWS_PER_PAGE);
    const arrow = (key) => (this.table.sort === key ? (this.table.descending ? ' ▼' : ' ▲') : '');
    const th = (key, label) => html`<th class="sortable" data-sort="${key}">${label}${arrow(key)}</th>`;
    this.setHtml(this.root.querySelector('#trials thead'), html`<tr>${th('number', '#')}${th('state', 'state')}
      ${th('space', 'space')}${th('objective', metric)}<th>params</th><th>system</th>${th('started', 'started')}
      ${th('duration', 'train time')}<th>reason</th></tr>`);
    this.setHtml(this.root.querySelector('#trials tbody'), html`${shown.map((t) => html`<tr class="link"
      data-number="${t.number}" title="trial #${t.number}: open its page">
      <td class="num">${t.number}</td><td>${stateBadge(t.state)}</td><td>${t.space ?? ''}</td>
      <td class="num">${shownValue(t, metric, this.curves.byId.get(t.id))}</td>
      <td><code>${compact(t.params)}</code></td><td><code>${compact(t.system)}</code></td>
      <td>${formatTime(t.started_ms)}</td><td class="num">${formatDuration(trainMs(t))}</td>
      <td class="muted">${t.reason}</td></tr>`)}`);
    this.setText(this.root.querySelector('#table-count'), `${rows.length} of ${trials.length} trials`);
    this.setText(this.root.querySelector('#table-page'), `page ${this.table.page + 1} of ${pages}`);
    const [prev, next] = this.root.querySelectorAll('.pager button');
    prev.disabled = this.table.page === 0;
    next.disabled = this.table.page >= pages - 1;
  }
}

// Best so far by trial number and over time: a dot per completed trial, the
// best-so-far as a step line. `full`: draw the charts anew; otherwise only
// their series' data (and the time axis' range) changes.
function drawBest({ trials, metric, direction }, full) {
  const best = bestSoFar(trials, metric, direction);
  const done = trials.filter((t) => t.state === 'completed' && objective(t, metric) !== null);
  const series = (x, points) => [
    { id: 'trial', name: 'trial', type: 'scatter', large: true, symbolSize: done.length > 1000 ? 3 : 6,
      itemStyle: { color: '#9ca3af', opacity: 0.6 }, data: seriesData(done.map((t) => [x(t), objective(t, metric)])) },
    { id: 'best', name: 'best so far', type: 'line', step: 'end', showSymbol: false, lineStyle: { width: 2 },
      data: seriesData(points) },
  ];
  const option = (x, points, xAxis) => (full ? {
    ...baseOption,
    tooltip: { trigger: 'axis' },
    legend: { top: 0 },
    xAxis, yAxis: { type: 'value', name: metric, scale: true, boundaryGap: ['5%', '5%'] },
    series: series(x, points),
  } : { xAxis, series: series(x, points) });
  const why = done.length ? null : 'no completed trial yet: each completed trial is a dot here';
  const byTrial = document.getElementById('best-trials');
  chart(byTrial, 'experiment.bestByTrial')
    .setOption(option((t) => t.number, best.byTrial, { type: 'value', name: 'trial', minInterval: 1 }), full);
  chartMessage(byTrial, why);
  // The time axis fitted to the finishing times (ECharts' own range for one
  // point spans two days).
  const byTime = document.getElementById('best-time');
  chart(byTime, 'experiment.bestByTime')
    .setOption(option((t) => t.finished_ms, best.byTime,
                      { type: 'time', axisLabel: { hideOverlap: true, ...INWARD_LABELS },
                        ...(timeRange(done.map((t) => t.finished_ms)) ?? {}) }), full);
  chartMessage(byTime, why);
}

// The learning curves of every trial, a large `lines` series per kind of
// trial (completed, pruned, the rest), and a ▲ where each pruned trial
// stopped. It keeps each trial's kind, so that an update hands ECharts only
// the series whose curves it touched: a report on a running trial changes
// "running and other" (usually a few curves), not the 10,000 others. Each
// series' data is ECharts' flat form of polylines, one Float64Array of
// [points, x, y, x, y, ..., points, x, y, ...], which it lays out without
// an object per curve.
class CurvesChart {
  // log: the value axis on a log scale; open(number): shows a trial (a
  // click on its curve).
  constructor(el, log, open) {
    this.el = el;
    this.log = log;
    this.open = open;
    this.items = new Map();  // trial id -> { group, curve }
    this.groups = { completed: flatLines([]), pruned: flatLines([]), other: flatLines([]) };
    this.ids = { completed: [], pruned: [], other: [] };  // per group, the trial id of each curve, in order
    this.trialsById = null;
    this.prunedEnds = [];
    this.extent = null;      // { x: [lo, hi], y: [lo, hi] } as last drawn
    this.points = 0;
    this.drawn = false;
  }

  // Draws the curves of `ids` (trial ids whose curve or state changed), or
  // of every trial when ids is null.
  draw({ trialsById, curves, metric }, ids) {
    this.trialsById = trialsById;
    this.metric = metric;
    const touched = new Set();
    const update = (id) => {
      const c = curves.get(id);
      if (!c) return;
      const held = this.items.get(id);
      const state = trialsById.get(id)?.state;
      const group = state === 'completed' || state === 'pruned' ? state : 'other';
      if (held && held.group === group && held.curve === c) return;
      if (held) touched.add(held.group);
      touched.add(group);
      this.items.set(id, { group, curve: c });
    };
    if (ids === null) {
      this.items.clear();
      for (const id of curves.keys()) update(id);
    } else {
      for (const id of new Set(ids)) update(id);
    }
    if (touched.size === 0 && this.drawn) return;
    for (const g of touched) {
      const curvesOf = [];
      const idsOf = [];
      for (const [id, item] of this.items) {
        if (item.group !== g || !item.curve.steps.length) continue;  // flatLines leaves empty curves out
        curvesOf.push(item.curve);
        idsOf.push(id);
      }
      this.groups[g] = flatLines(curvesOf);
      this.ids[g] = idsOf;
      if (g === 'pruned') {
        this.prunedEnds = curvesOf.map((c) => [c.steps.at(-1), c.values.at(-1)]);
      }
    }
    // 'lines' series do not widen the axes: their extent is set here.
    const extent = { x: [Infinity, -Infinity], y: [Infinity, -Infinity] };
    this.points = 0;
    for (const c of curves.values()) {
      this.points += c.steps.length;
      for (const s of c.steps) {
        if (s < extent.x[0]) extent.x[0] = s;
        if (s > extent.x[1]) extent.x[1] = s;
      }
      for (const v of c.values) {
        if (v < extent.y[0]) extent.y[0] = v;
        if (v > extent.y[1]) extent.y[1] = v;
      }
    }
    this.minPositive = Infinity;  // for a log axis
    for (const c of curves.values()) for (const v of c.values) if (v > 0 && v < this.minPositive) this.minPositive = v;
    const sameExtent = this.extent && ['x', 'y'].every((a) => extent[a].every((v, i) => v === this.extent[a][i]));
    this.extent = extent;
    const lines = (id, name, color, opacity) => ({
      id, name, type: 'lines', coordinateSystem: 'cartesian2d', polyline: true, large: true, largeThreshold: 500,
      // ECharts keeps flat data as a typed array of a value per curve, and its
      // development build wants typed data's dimensions named.
      dimensions: ['value'], data: this.groups[id], lineStyle: { color, width: 1, opacity },
    });
    const prunedAt = () => ({
      id: 'pruned at', name: 'pruned at', type: 'scatter', symbol: 'triangle', symbolSize: 6, large: true,
      itemStyle: { color: PALETTE[1] }, data: seriesData(this.prunedEnds),
    });
    const axes = this.axes();
    const c = chart(this.el, 'experiment.curves');
    chartMessage(this.el, this.points ? null
      : 'no trial has reported a step yet: each trial\'s reports draw a curve here');
    if (!this.drawn) {
      c.setOption({
        ...baseOption,
        // Hovering a curve names its trial; a click opens the trial's page.
        tooltip: { trigger: 'item', confine: true, formatter: (p) => this.tooltip(p) },
        legend: { top: 0, data: ['completed', 'pruned', 'running and other', 'pruned at'] },
        ...axes,
        series: [
          lines('completed', 'completed', PALETTE[0], 0.35),
          lines('pruned', 'pruned', PALETTE[1], 0.35),
          lines('other', 'running and other', PALETTE[4], 0.6),
          prunedAt(),
        ],
      }, true);
      c.on('click', (p) => {
        const t = this.trialAt(p);
        if (t) this.open(t.number);
      });
      this.drawn = true;
      return;
    }
    const series = [];
    if (touched.has('completed')) series.push(lines('completed', 'completed', PALETTE[0], 0.35));
    if (touched.has('pruned')) series.push(lines('pruned', 'pruned', PALETTE[1], 0.35), prunedAt());
    if (touched.has('other')) series.push(lines('other', 'running and other', PALETTE[4], 0.6));
    // ECharts (6.1) offsets a lines series' new flat data by the coordinates
    // the series held (as appendData must), which lays the new curves out as
    // NaN: the series are emptied first, without drawing (lazyUpdate; the
    // next setOption draws).
    c.setOption({ series: series.filter((s) => s.type === 'lines').map(({ id }) => ({ id, data: [] })) },
                { lazyUpdate: true });
    c.setOption({ ...(sameExtent ? {} : axes), series });
  }

  axes() {
    const { x, y } = this.extent;
    return {
      xAxis: { type: 'value', name: 'step', minInterval: 1, ...axisRange(x) },
      yAxis: this.log && this.points && this.allPositive()
        ? { type: 'log', name: `${this.metric} (log)`, min: this.minPositive, max: y[1],
            axisLabel: { formatter: (v) => formatNumber(v, 3) } }
        : { type: 'value', name: this.metric, ...axisRange(y, 0.05) },
    };
  }

  // Every value above 0 (what a log axis can show), or no value at all.
  allPositive() {
    return !(this.extent && this.extent.y[0] <= 0);
  }

  setLog(log) {
    this.log = log;
    if (this.drawn) chart(this.el, 'experiment.curves').setOption(this.axes());
  }

  // The trial a curve (or a ▲) of a tooltip's or click's event belongs to.
  trialAt({ seriesId, dataIndex }) {
    const group = seriesId === 'pruned at' ? 'pruned' : seriesId;
    const id = this.ids[group]?.[dataIndex];
    return id === undefined ? null : this.trialsById?.get(id) ?? null;
  }

  // A DOM node, not markup (see web/js/dom.js): the space and parameter
  // names are the submitter's.
  tooltip(p) {
    const t = this.trialAt(p);
    if (!t) return element('div', null, p.seriesName);
    const curve = this.items.get(t.id)?.curve;
    const last = curve?.steps.length
      ? `last: ${formatNumber(curve.values.at(-1))} at step ${curve.steps.at(-1)}` : null;
    return element('div', null,
      element('div', null, element('b', null, `trial #${t.number}`), ` ${t.state}`, t.space ? ` · ${t.space}` : ''),
      element('div', null, compact(t.params)),
      last && element('div', null, `${this.metric} ${last}`),
      element('div', 'muted', 'click: open the trial'));
  }

  note(downsampled) {
    return `${this.items.size} trials, ${this.points} points` +
      (downsampled ? ' (long curves thinned by the server, first and last steps kept)' : '') +
      `; ${this.prunedEnds.length} pruned, marked ▲ where they stopped.`;
  }
}

// Curves ({ steps, values }) as one series' data in ECharts' flat form of
// polylines (lines series, SeriesLinesOption.data). A curve of one point is
// drawn as two (ECharts' large polylines need two).
function flatLines(curves) {
  let size = 0;
  for (const c of curves) size += c.steps.length ? 1 + 2 * Math.max(2, c.steps.length) : 0;
  if (size === 0) return [];  // ECharts takes an empty typed array for another format
  const out = new Float64Array(size);
  let at = 0;
  for (const { steps, values } of curves) {
    const n = steps.length;
    if (n === 0) continue;
    out[at++] = Math.max(2, n);
    for (let i = 0; i < n; i++) {
      out[at++] = steps[i];
      out[at++] = values[i];
    }
    if (n === 1) {
      out[at++] = steps[0];
      out[at++] = values[0];
    }
  }
  return out;
}

// A horizontal axis with bounds set by hand may have a label at either end
// of the chart: aligned inwards, it stays on the canvas.
const INWARD_LABELS = { alignMinLabel: 'left', alignMaxLabel: 'right' };

// Axis bounds for [lo, hi] (none when empty), with a margin of `pad` of the
// span (of 5% of the value for a single one). Set by hand, the bounds get
// labels beside the nice ticks (0.59 was drawn over 0.6): with a margin
// they go unlabelled, without one (steps) overlapping labels are hidden.
function axisRange([lo, hi], pad = 0) {
  if (!(lo <= hi)) return {};
  const margin = lo === hi ? Math.abs(lo) * 0.05 || 1 : (hi - lo) * pad;
  const ends = margin > 0 ? { showMinLabel: false, showMaxLabel: false } : { hideOverlap: true, ...INWARD_LABELS };
  return { min: lo - margin, max: hi + margin, axisLabel: { formatter: (v) => formatNumber(v, 3), ...ends } };
}

function drawSpaces({ exp, trials }, full) {
  const el = document.getElementById('spaces');
  const history = spaceHistory(trials, exp.spaces);
  const series = exp.spaces.flatMap((s, i) => [
    { id: `${i} priority`, name: `${s} priority`, type: 'line', step: 'end', showSymbol: false,
      color: PALETTE[i % PALETTE.length], data: seriesData(history[s].priority) },
    { id: `${i} share`, name: `${s} share`, type: 'line', showSymbol: false, color: PALETTE[i % PALETTE.length],
      lineStyle: { type: 'dashed' }, data: seriesData(history[s].share) },
  ]);
  chart(el, 'experiment.spaces').setOption(full ? {
    ...baseOption,
    tooltip: { trigger: 'axis', valueFormatter: (v) => formatNumber(v, 3) },
    legend: { top: 0, type: 'scroll' },
    xAxis: { type: 'value', name: 'trial', min: 'dataMin', max: 'dataMax', minInterval: 1 },
    yAxis: { type: 'value', min: 0, max: 1 },
    series,
  } : { series }, full);
  chartMessage(el, trials.length ? null : 'no trial created yet');
}

// Importance, or why it is not known yet (too few completed trials: a
// ranking of a handful says nothing; see importanceView in analysis.js).
function drawImportance({ trials, metric }, full) {
  const { rows, why } = importanceView(trials, metric);
  const el = document.getElementById('importance');
  const yAxis = { type: 'category', inverse: true, data: rows.map((r) => `${r.param} (${r.trials})`) };
  const series = [{ id: 'importance', type: 'bar', name: 'importance', data: rows.map((r) => r.importance),
                    label: { show: true, position: 'right', formatter: ({ value }) => formatNumber(value, 2) } }];
  chart(el, 'experiment.importance').setOption(full ? {
    ...baseOption,
    tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' }, valueFormatter: (v) => formatNumber(v, 3) },
    xAxis: { type: 'value', name: 'R²', min: 0, max: 1 },
    yAxis,
    series,
  } : { yAxis, series }, full);
  chartMessage(el, why);
}

// Waits until the browser has drawn a frame (a paint of what the page holds).
function nextFrame() {
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
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
    grid: { left: 16, right: 30, top: 30, bottom: 22 * Math.min(series.length, 6) + 40, ...GRID },
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
// A front point's tooltip: its trial, the two values, why it is infeasible.
function frontTooltip(data, ox, oy) {
  if (!data) return '';
  return element('div', null,
    element('div', null, element('b', null, `trial #${data.number}`), ` ${data.space ?? ''}`),
    element('div', null, `${ox.metric} ${formatNumber(data.value[0])}`),
    element('div', null, `${oy.metric} ${formatNumber(data.value[1])}`),
    ...(data.deviceClass ? [element('div', null, `trained on ${data.deviceClass}`)] : []),
    ...(data.reasons.length ? [element('div', null, `infeasible: ${data.reasons.join('; ')}`)] : []));
}

function tuningTooltip({ data }) {
  return element('div', null,
    element('div', null, element('b', null, data.deviceClass)),
    element('div', null, data.workload),
    element('div', null, data.batch),
    element('div', null, data.setting || '(no system parameters)', data.isChosen ? ' ✓' : ''),
    element('div', null, `${formatNumber(data.value)} samples/s, ${data.observations} observations`));
}

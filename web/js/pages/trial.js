// One trial, #/experiments/EID/trials/NUMBER (a click on its row in the
// trials table, or on its learning curve): its state and reason, objective,
// device and wall time, parameters and system setting, its intermediate
// values as curves (every metric it reported, by step), the devices it ran
// on, what happened between its steps (paused at a rung, moved, preempted,
// requeued, ...: the server's kept trial events), and its measurements with
// each step's device and device time (the summary's device time is their
// sum: training time, without time paused at a rung), and a failed trial's
// log tail (the end of its reason), from GET
// /api/v1/trials/{id}. The route
// names the trial by its number in the experiment, what users see
// everywhere; its id (what /trials/{id} takes) comes from one keyset read of
// the experiment's trials (?after=NUMBER-1&limit=1). Live: an event about
// the trial refreshes the page.
import { getJson } from '../api.js';
import { objectivesOf, trialSeries } from '../analysis.js';
import {
  baseOption, chart, chartMessage, compact, formatDuration, formatNumber, formatTime, shownValue,
} from '../charts.js';
import { html, setHtml, stateBadge } from '../dom.js';

export class TrialPage {
  constructor(root, experimentId, number) {
    this.root = root;
    this.experimentId = experimentId;
    this.number = number;
    this.trialId = null;  // known after the first read
    this.el = null;
  }

  wants(type, data) {
    return this.trialId === null ? data.experiment_id === this.experimentId : data.trial_id === this.trialId;
  }

  async refresh() {
    const base = `/api/v1/experiments/${this.experimentId}`;
    const experiment = getJson(base);
    if (this.trialId === null) {
      const after = this.number > 0 ? `&after=${this.number - 1}` : '';
      const { trials } = await getJson(`${base}/trials?limit=1${after}`);
      if (trials[0]?.number !== this.number) {
        throw new Error(`experiment ${this.experimentId} has no trial #${this.number}`);
      }
      this.trialId = trials[0].id;
    }
    const [exp, trial] = await Promise.all([experiment, getJson(`/api/v1/trials/${this.trialId}`)]);
    if (!this.el || !this.root.contains(this.el)) this.build(exp, trial);
    this.draw(exp, trial);
  }

  build(exp, trial) {
    setHtml(this.root, html`
      <div id="trial">
        <h1>Trial #${trial.number} <span class="muted">of <a href="#/experiments/${exp.id}">${exp.name}</a>
          · id ${trial.id}</span></h1>
        <div class="summary" id="trial-summary"></div>
        <div class="grid">
          <div class="panel"><h2>Intermediate values</h2><div class="chart tall" id="trial-values"></div>
            <p class="note">Every metric the trial reported, by step (the legend shows or hides each; the
            objective is shown first).</p></div>
          <div class="panel"><h2>Parameters</h2><table id="trial-params"></table>
            <h2 style="margin-top:16px">System setting</h2><table id="trial-system"></table></div>
        </div>
        <div class="grid">
          <div class="panel"><h2>Devices</h2>
            <table id="trial-devices"><thead><tr><th>worker</th><th>device</th><th>class</th><th>steps</th>
              <th>device time</th></tr></thead><tbody></tbody></table></div>
          <div class="panel"><h2>Events</h2>
            <table id="trial-events"><thead><tr><th>when</th><th>event</th><th>details</th></tr></thead>
              <tbody></tbody></table>
            <p class="note">Creation, the first lease, each step and the end are the trial's own fields and
            measurements; these are what happened between steps.</p></div>
        </div>
        <div class="panel" id="trial-log-panel" hidden><h2>Log tail</h2>
          <p class="note">What the trial's program printed last, as its worker sent it with the failure.</p>
          <pre id="trial-log"></pre></div>
        <div class="panel"><h2>Measurements</h2>
          <table id="trial-measurements"><thead><tr><th>step</th><th>metrics</th><th>samples/s</th><th>system</th>
            <th>device</th>
            <th title="training time of the step on its device">device time</th><th>cost</th><th>reported</th>
          </tr></thead><tbody></tbody></table></div>
      </div>`);
    this.el = this.root.querySelector('#trial');
  }

  draw(exp, trial) {
    const metric = objectivesOf(exp.spec)[0]?.metric;
    // A failed trial's reason is its worker's (or client's) words, then,
    // after a line break, its program's log tail: the first line in the
    // summary, the rest in its own panel.
    const [reason, ...tail] = (trial.reason || '').split('\n');
    const logPanel = this.root.querySelector('#trial-log-panel');
    logPanel.hidden = tail.length === 0;
    this.root.querySelector('#trial-log').textContent = tail.join('\n');
    const { metrics, byMetric, deviceMs } = trialSeries(trial.measurements ?? [], metric);
    const wallMs = trial.started_ms && trial.finished_ms ? trial.finished_ms - trial.started_ms : null;
    setHtml(this.root.querySelector('#trial-summary'), html`
      <div><span class="muted">state</span>${stateBadge(trial.state)}</div>
      <div><span class="muted">${metric}${trial.final_metrics ? '' : ' (last report)'}</span>
        <b id="trial-objective">${shownValue(trial, metric)}</b></div>
      <div><span class="muted">space</span><b>${trial.space ?? '–'}</b></div>
      <div><span class="muted">device time</span><b id="trial-device-time">${formatDuration(
        trial.device_seconds > 0 ? 1000 * trial.device_seconds : deviceMs || null)}</b></div>
      <div><span class="muted">started · finished</span><b>${formatTime(trial.started_ms)} · ${
        formatTime(trial.finished_ms)}${wallMs === null ? '' : ` (${formatDuration(wallMs)})`}</b></div>
      <div><span class="muted">attempt</span><b>${trial.attempt}</b></div>
      <div><span class="muted">reason</span><b id="trial-reason">${reason || '–'}</b></div>`);
    setHtml(this.root.querySelector('#trial-params'), keyValues(trial.params));
    setHtml(this.root.querySelector('#trial-system'), keyValues(trial.system));
    setHtml(this.root.querySelector('#trial-measurements tbody'), html`${(trial.measurements ?? []).map((m) => html`
      <tr><td class="num">${m.step}</td><td><code>${compact(m.metrics)}</code></td>
        <td class="num">${m.samples_per_sec ? formatNumber(m.samples_per_sec) : '–'}</td>
        <td><code>${compact(m.system)}</code></td><td>${m.device_class || '–'}</td>
        <td class="num">${formatDuration(m.device_ms || null)}</td>
        <td class="num">${m.cost ? formatNumber(m.cost, 3) : '–'}</td><td>${formatTime(m.created_ms)}</td></tr>`)}`);
    const devices = trial.devices ?? [];
    setHtml(this.root.querySelector('#trial-devices tbody'), devices.length === 0
      ? html`<tr><td colspan="5" class="muted">no step ran on a worker's device (an ask/tell client's trial, or
          none reported yet)</td></tr>`
      : html`${devices.map((d) => html`<tr><td>${d.host ?? `worker ${d.worker_id ?? '(gone)'}`}</td>
          <td>${d.name ?? `device ${d.device_id}`}</td><td>${d.device_class}</td><td class="num">${d.steps}</td>
          <td class="num">${formatDuration(d.device_seconds > 0 ? 1000 * d.device_seconds : null)}</td></tr>`)}`);
    const events = trial.events ?? [];
    setHtml(this.root.querySelector('#trial-events tbody'), events.length === 0
      ? html`<tr><td colspan="3" class="muted">nothing between its steps yet</td></tr>`
      : html`${events.map((e) => html`<tr><td>${formatTime(e.created_ms)}</td>
          <td>${e.type.replace(/^trial\./, '')}</td><td><code>${compact(e.data)}</code></td></tr>`)}`);
    const el = this.root.querySelector('#trial-values');
    const shown = (m) => m === metric || !metrics.includes(metric);  // the objective, or every metric without it
    chart(el, 'trial.values').setOption({
      ...baseOption,
      tooltip: { trigger: 'axis', valueFormatter: (v) => formatNumber(v) },
      legend: { top: 0, type: 'scroll', selected: Object.fromEntries(metrics.map((m) => [m, shown(m)])) },
      xAxis: { type: 'value', name: 'step', minInterval: 1, scale: true },
      // A margin of 5% of the values' span (of the value, for one): ECharts'
      // own range for a single point at 0.8 is 0.4-1.4.
      yAxis: { type: 'value', name: metrics.includes(metric) ? metric : '', scale: true, boundaryGap: ['5%', '5%'] },
      series: metrics.map((m) => ({ id: m, name: m, type: 'line', showSymbol: true, symbolSize: 5,
                                    data: byMetric[m] })),
    }, true);
    chartMessage(el, metrics.length ? null : 'no step reported yet: each report is a point here');
  }
}

function keyValues(obj) {
  const entries = Object.entries(obj ?? {});
  if (entries.length === 0) return html`<tr><td class="muted">none</td></tr>`;
  return html`${entries.map(([k, v]) => html`<tr><th>${k}</th>
    <td>${typeof v === 'number' ? formatNumber(v, 6) : String(v)}</td></tr>`)}`;
}

// The experiments: state, progress against the trial budget, best value and
// start time, and a chart of each one's trials by state.
import { getJson, getJsonOrNull } from '../api.js';
import { objective, objectivesOf } from '../analysis.js';
import { baseOption, chart, formatNumber, formatTime } from '../charts.js';
import { html, setHtml, stateBadge } from '../dom.js';

const PAGE_SIZE = 25;
const STATES = ['completed', 'pruned', 'failed', 'cancelled', 'running', 'leased', 'paused', 'pending'];
const STATE_COLORS = ['#1a9b5c', '#e8a33d', '#c2410c', '#9ca3af', '#2f6fde', '#7aa7f0', '#a78bfa', '#d5d9e0'];

export class ExperimentsPage {
  constructor(root, refreshNow) {
    this.root = root;
    this.refreshNow = refreshNow;
    this.offset = 0;
  }

  wants(type) {
    return type.startsWith('experiment.') || ['trial.finished', 'trial.created', 'trial.requeued', 'trial.paused',
      'trial.resumed'].includes(type);
  }

  async refresh() {
    const { experiments } = await getJson(`/api/v1/experiments?offset=${this.offset}&limit=${PAGE_SIZE + 1}`);
    const more = experiments.length > PAGE_SIZE;
    const shown = experiments.slice(0, PAGE_SIZE);
    // Budget and best value are per experiment: one request each, for this page only.
    const rows = await Promise.all(shown.map(async (e) => {
      const [detail, best] = await Promise.all([
        getJson(`/api/v1/experiments/${e.id}`),
        // Ended without a completed trial: the server's partial best (the
        // best report of any trial), not asked of running ones on every refresh.
        e.trials?.completed || (e.state !== 'running' && e.trials?.total)
          ? getJsonOrNull(`/api/v1/experiments/${e.id}/best`) : null]);
      return { ...e, spec: detail.spec, best };
    }));
    setHtml(this.root, html`
      <h1>Experiments</h1>
      ${rows.length === 0 ? html`<p class="muted">No experiments yet: submit one with <code>hpctl submit</code>
        or <code>POST /api/v1/experiments</code>.</p>` : html`
      <div class="panel">
        <table id="experiments">
          <thead><tr><th>id</th><th>name</th><th>state</th><th>progress</th><th>best</th><th>started</th><th>spaces</th></tr></thead>
          <tbody>${rows.map(row)}</tbody>
        </table>
        <div class="pager">
          <button data-page="-1" ${this.offset === 0 ? 'disabled' : ''}>newer</button>
          <button data-page="1" ${more ? '' : 'disabled'}>older</button>
        </div>
      </div>
      <div class="panel" style="margin-top:16px">
        <h2>Trials by state, as % of each budget</h2>
        <div class="chart" id="states-chart" style="height:${Math.max(160, 36 * rows.length + 80)}px"></div>
      </div>`}`);
    this.root.querySelector('.pager')?.addEventListener('click', (e) => {
      const step = e.target.closest('[data-page]')?.dataset.page;
      if (!step) return;
      this.offset = Math.max(0, this.offset + Number(step) * PAGE_SIZE);
      this.refreshNow();
    });
    if (rows.length) drawStates(rows);
  }
}

function row(e) {
  const n = e.trials ?? {};
  const finished = (n.completed ?? 0) + (n.pruned ?? 0) + (n.failed ?? 0) + (n.cancelled ?? 0);
  const budget = e.spec?.budget?.max_trials ?? 100;
  const metric = objectivesOf(e.spec)[0]?.metric;
  const partial = e.best?.partial === true;
  const best = e.best ? objective(partial ? { final_metrics: e.best.best_metrics } : e.best, metric) : null;
  return html`<tr data-id="${e.id}">
    <td class="num">${e.id}</td>
    <td><a href="#/experiments/${e.id}">${e.name}</a></td>
    <td>${stateBadge(e.state)}</td>
    <td><span class="progress"><i style="width:${Math.min(100, (100 * finished) / budget).toFixed(1)}%"></i></span>
        ${finished} / ${budget}</td>
    <td class="num">${best === null ? '–'
      : `${metric} ${formatNumber(best)}${partial ? ` (partial: trial #${e.best.number}, step ${e.best.best_step})` : ''}`}</td>
    <td>${formatTime(e.created_ms)}</td>
    <td>${(e.spec?.spaces ?? []).map((s) => s.name).join(', ')}</td>
  </tr>`;
}

// Each experiment's trials by state, as percentages of its trial budget, so
// small experiments show next to big ones (the tooltip has the counts).
function drawStates(rows) {
  const labels = rows.map((e) => `#${e.id} ${e.name}`);
  const budget = (e) => e.spec?.budget?.max_trials ?? 100;
  chart(document.getElementById('states-chart'), 'experiments.states').setOption({
    ...baseOption,
    tooltip: {
      trigger: 'axis', axisPointer: { type: 'shadow' },
      valueFormatter: (v) => `${formatNumber(v, 3)}%`,
    },
    legend: { top: 0 },
    xAxis: { type: 'value', name: '% of budget', max: (extent) => Math.max(100, extent.max) },
    yAxis: { type: 'category', data: labels, inverse: true },
    series: STATES.map((s, i) => ({
      name: s, type: 'bar', stack: 'trials', color: STATE_COLORS[i],
      data: rows.map((e) => (100 * (e.trials?.[s] ?? 0)) / budget(e)),
    })),
  }, true);
}

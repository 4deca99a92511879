// The fleet: workers, their devices, measured samples/s per workload, what
// each is running now and how busy it is. Heartbeats send no events, so the
// page is also polled (pollMs). Gone workers are not listed (the server
// leaves them out); a silent one (unheard for a lease timeout, not placed
// on) is listed as such but not counted.
import { getJson } from '../api.js';
import { fleetUtilization } from '../analysis.js';
import { baseOption, chart, formatNumber, formatTime } from '../charts.js';
import { html, setHtml } from '../dom.js';

const ROW_PX = 28;  // a bar chart's height per bar

export class FleetPage {
  constructor(root) {
    this.root = root;
    this.pollMs = 10000;
  }

  wants(type) {
    return type.startsWith('trial.') || type.startsWith('worker.');
  }

  async refresh() {
    const { workers } = await getJson('/api/v1/workers');
    const live = workers.filter((w) => (w.state ?? 'live') === 'live');
    const use = fleetUtilization(live);
    const now = Date.now();
    setHtml(this.root, html`
      <div id="fleet">
        <h1>Fleet</h1>
        <div class="summary">
          <div><span class="muted">live workers</span><b>${live.length}</b></div>
          <div><span class="muted">devices</span><b>${use.devices}</b></div>
          <div><span class="muted">busy devices</span><b>${use.busy}</b></div>
          <div><span class="muted">utilization</span><b id="utilization">${Math.round(100 * use.utilization)}%</b></div>
        </div>
        ${workers.length === 0 ? html`<p class="muted">No workers registered. Start one:
          <code>hpo-worker --server HOST:50051</code>.</p>` : html`
        <div class="grid">
          <div class="panel"><h2>Measured samples/s per device and workload</h2><div class="chart" id="speed"></div>
            <p class="note">The newest report of each (device, workload); the GEMM benchmark in GFLOP/s is the
            prior the scheduler uses until a workload has been measured.</p></div>
          <div class="panel"><h2>Utilization per worker</h2><div class="chart" id="busy"></div>
            <p class="note">Devices running a trial over devices (a worker runs one trial per device).</p></div>
        </div>
        <div class="panel">
          <table id="workers">
            <thead><tr><th>worker</th><th>host</th><th>labels</th><th>last seen</th><th>devices</th>
              <th>measured samples/s</th><th>current trials</th></tr></thead>
            <tbody>${workers.map((w) => workerRow(w, now))}</tbody>
          </table>
        </div>`}
      </div>`);
    if (workers.length) {
      drawSpeed(workers);
      drawBusy(use);
    }
  }
}

function workerRow(w, now) {
  const labels = Object.entries(w.labels).map(([k, v]) => `${k}=${v}`).join(' ');
  return html`<tr data-worker="${w.id}">
    <td class="num">${w.id}</td><td>${w.host}</td><td><code>${labels}</code></td>
    <td title="${formatTime(w.last_seen_ms)}">${Math.max(0, Math.round((now - w.last_seen_ms) / 1000))} s ago
      ${w.state && w.state !== 'live' ? html`<br><span class="muted">${w.state}</span>` : ''}</td>
    <td>${w.devices.map((d) => html`<div>${d.kind} ${d.ordinal}: ${d.name} · ${formatNumber(d.cores, 3)} cores ·
      ${formatNumber(d.benchmark_gflops, 3)} GFLOP/s<br><span class="muted">${d.device_class}</span>
      ${(d.prices ?? []).map((p) => html`<br><span class="cost">${formatNumber(p.per_hour, 3)}/h
        <span class="muted">(experiment ${p.experiment_id})</span></span>`)}</div>`)}</td>
    <td>${w.devices.flatMap((d) => d.measured.map((m) => html`<div>${m.workload}:
      <b>${formatNumber(m.samples_per_sec, 4)}</b> <span class="muted">${compact(m.system)}</span></div>`))}</td>
    <td>${w.current_trials.length === 0 ? html`<span class="muted">idle</span>` : w.current_trials.map((t) =>
      html`<div><a href="#/experiments/${t.experiment_id}">experiment ${t.experiment_id}</a> trial #${t.number}
        (${t.state})</div>`)}</td>
  </tr>`;
}

function compact(obj) {
  return Object.entries(obj ?? {}).map(([k, v]) => `${k}=${v}`).join(' ');
}

function drawSpeed(workers) {
  const labels = [];
  const measured = [];
  const gflops = [];
  for (const w of workers) {
    for (const d of w.devices) {
      const rows = d.measured.length ? d.measured : [null];
      for (const m of rows) {
        labels.push(`w${w.id}/${d.kind}${d.ordinal}${m ? ` · ${m.workload}` : ''}`);
        measured.push(m ? m.samples_per_sec : null);
        gflops.push(d.benchmark_gflops);
      }
    }
  }
  // A row per bar, tall enough for its label (they overlapped at 11 rows).
  const el = document.getElementById('speed');
  el.style.height = `${Math.max(240, ROW_PX * labels.length + 120)}px`;
  chart(el, 'fleet.speed').setOption({
    ...baseOption,
    grid: { ...baseOption.grid, top: 64 },
    tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' } },
    legend: { top: 0 },
    // Two quantities, two axes: measured samples/s below, the benchmark's
    // GFLOP/s above (they once shared the samples/s axis).
    xAxis: [{ type: 'value', name: 'samples/s', position: 'bottom', nameLocation: 'middle', nameGap: 26 },
            { type: 'value', name: 'GFLOP/s', position: 'top', nameLocation: 'middle', nameGap: 26,
              splitLine: { show: false } }],
    yAxis: { type: 'category', inverse: true, data: labels, axisLabel: { width: 260, overflow: 'truncate' } },
    series: [
      { name: 'measured samples/s', type: 'bar', xAxisIndex: 0, data: measured },
      { name: 'benchmark GFLOP/s', type: 'scatter', xAxisIndex: 1, symbol: 'diamond', symbolSize: 10, data: gflops },
    ],
  }, true);
}

function drawBusy(use) {
  const el = document.getElementById('busy');
  el.style.height = `${Math.max(240, ROW_PX * use.perWorker.length + 100)}px`;
  chart(el, 'fleet.utilization').setOption({
    ...baseOption,
    tooltip: { trigger: 'axis', axisPointer: { type: 'shadow' } },
    xAxis: { type: 'value', min: 0, max: 100, name: '%' },
    yAxis: { type: 'category', inverse: true, data: use.perWorker.map((w) => `w${w.id} ${w.host}`),
             axisLabel: { width: 260, overflow: 'truncate' } },
    series: [{ type: 'bar', name: 'utilization %', data: use.perWorker.map((w) => Math.round(100 * w.utilization)),
               label: { show: true, position: 'right',
                        formatter: (p) => `${use.perWorker[p.dataIndex].busy}/${use.perWorker[p.dataIndex].devices}` } }],
  }, true);
}

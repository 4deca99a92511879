// Apache ECharts, loaded from the npm package under the web root (pinned by
// web/package-lock.json; scripts/setup runs `npm ci`). Canvas rendering, so
// tens of thousands of points stay cheap.
//
// Every chart is registered by name in window.hpoCharts (name -> ECharts
// instance): the browser tests read the drawn series from there, and it is
// handy in the console.
import * as echarts from '/node_modules/echarts/dist/echarts.esm.min.mjs';
import { shownObjective } from './analysis.js';
import { element } from './dom.js';

export { echarts };

const registry = new Map();
window.hpoCharts = registry;

export const PALETTE = ['#2f6fde', '#e8772e', '#1a9b5c', '#9b59b6', '#d63b5a', '#0f9bb4', '#8c6d1f', '#5b6474'];

// The chart drawn in `el`, created on first use. A page that redrew its
// markup gets a new instance; the one on the old element is disposed.
export function chart(el, name) {
  const old = registry.get(name);
  if (old && old.getDom() !== el) old.dispose();
  const c = echarts.getInstanceByDom(el) ?? echarts.init(el, null, { renderer: 'canvas' });
  registry.set(name, c);
  return c;
}

// Data for a series, handed to ECharts as it is. ECharts deep-copies the
// option it is given, data included, once or twice per setOption (zrender's
// `clone`): at 10,000 trials, an array per point, that copying and its
// garbage are a good part of a chart's drawing time. An array marked with
// zrUtil.setAsPrimitive is kept by reference instead (as ECharts does with
// typed arrays). REQUIRES: the array is not changed after it is given (the
// pages build a new one for every setOption).
export function seriesData(array) {
  echarts.zrUtil.setAsPrimitive(array);
  return array;
}

export function disposeCharts() {
  for (const c of registry.values()) c.dispose();
  registry.clear();
}

window.addEventListener('resize', () => {
  for (const c of registry.values()) c.resize();
});

// The grid keeps axis labels and axis names inside it (outerBoundsContain
// 'all'; containLabel, ECharts' older way, left names out, so "trial" and
// "samples/s" were cut at the chart's edge).
export const GRID = { outerBoundsMode: 'same', outerBoundsContain: 'all' };

export const baseOption = {
  animation: false,
  color: PALETTE,
  grid: { left: 16, right: 24, top: 36, bottom: 12, ...GRID },
  tooltip: { trigger: 'item', confine: true },
};

// Says over a chart why it has nothing to draw (`why`: "no completed trial
// yet"), or takes that away (null). A text node in the chart's element,
// above its canvas; call it after chart() (ECharts empties the element
// when it starts a chart there).
export function chartMessage(el, why) {
  let note = el.querySelector(':scope > .chart-empty');
  if (!why) {
    note?.remove();
    return;
  }
  if (!note) {
    note = element('div', 'chart-empty');
    el.append(note);
  }
  if (note.textContent !== why) note.textContent = why;
}

export function formatNumber(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(digits - 1) : v.toPrecision(digits).replace(/\.?0+$/, '');
}

export function formatTime(ms) {
  return ms ? new Date(ms).toLocaleString() : '–';
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined) return '–';
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// Parameters or a system setting as one line: "lr=0.001 optimizer=adam".
export function compact(obj) {
  return Object.entries(obj ?? {}).map(([k, v]) => `${k}=${typeof v === 'number' ? formatNumber(v) : v}`).join(' ');
}

// A trial's objective as the tables show it: the final value, or the last
// report's with its step ("0.871 @ step 3") for a trial without one
// (shownObjective in analysis.js; `curve`: its learning curve, if held).
export function shownValue(t, metric, curve = null) {
  const { value, step } = shownObjective(t, metric, curve);
  return step === null ? formatNumber(value) : `${formatNumber(value)} @ step ${step}`;
}

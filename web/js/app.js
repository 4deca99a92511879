// The dashboard: a single page with hash routes,
//   #/                the experiments
//   #/experiments/ID  one experiment
//   #/fleet           workers and devices
// kept live by /api/v1/events: an event the current page cares about
// schedules one refresh (debounced, never two at once), so a burst of
// reports costs one round of requests, not one per report. A page with
// pollMs is also refreshed that often (for changes that send no event).
import { ApiError, setToken, subscribe, takeTokenFromUrl } from './api.js';
import { disposeCharts } from './charts.js';
import { html, setHtml } from './dom.js';
import { ExperimentsPage } from './pages/experiments.js';
import { ExperimentPage } from './pages/experiment.js';
import { FleetPage } from './pages/fleet.js';

const REFRESH_DEBOUNCE_MS = 700;
const root = document.getElementById('view');
let page = null;
let generation = 0;  // a refresh of an earlier page is dropped
let poll = null;

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const m = hash.match(/^\/experiments\/(\d+)$/);
  if (m) return { name: 'experiments', make: () => new ExperimentPage(root, Number(m[1])) };
  if (hash === '/fleet') return { name: 'fleet', make: () => new FleetPage(root) };
  return { name: 'experiments', make: () => new ExperimentsPage(root) };
}

async function show() {
  const r = route();
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === r.name);
  disposeCharts();
  clearInterval(poll);
  page = r.make();
  generation++;
  if (page.pollMs) poll = setInterval(scheduleRefresh, page.pollMs);
  root.dataset.renders = '0';
  setHtml(root, html`<p class="muted">Loading…</p>`);
  await refresh();
}

// Refreshes the page; failures are shown in place of it.
async function refresh() {
  const mine = generation;
  try {
    await page.refresh();
    if (mine !== generation) return;
    root.dataset.renders = String(Number(root.dataset.renders) + 1);
  } catch (e) {
    if (mine !== generation) return;
    if (e instanceof ApiError && e.status === 401) document.getElementById('token-form').hidden = false;
    disposeCharts();
    setHtml(root, html`<p class="error">${e.message}</p>`);
    console.error(e.stack ?? e);
  }
}

let timer = null;
let running = null;
let again = false;
function scheduleRefresh() {
  if (running) {
    again = true;
    return;
  }
  if (timer) return;
  timer = setTimeout(async () => {
    timer = null;
    running = refresh();
    await running;
    running = null;
    if (again) {
      again = false;
      scheduleRefresh();
    }
  }, REFRESH_DEBOUNCE_MS);
}

function startLive() {
  const badge = document.getElementById('live');
  const text = { on: 'live', connecting: 'reconnecting', off: 'offline' };
  subscribe(
    (type, data) => {
      if (type === 'lagged' || page?.wants(type, data)) scheduleRefresh();
    },
    (status) => {
      badge.textContent = text[status];
      badge.className = `live ${status}`;
    },
  );
}

document.getElementById('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  setToken(document.getElementById('token-input').value.trim());
  location.reload();
});

takeTokenFromUrl();
window.addEventListener('hashchange', show);
startLive();
show();

// The dashboard: a single page with hash routes,
//   #/                the experiments
//   #/experiments/ID  one experiment
//   #/experiments/ID/trials/NUMBER  one trial (by its number in the experiment)
//   #/fleet           workers and devices
// kept live by /api/v1/events: an event the current page cares about
// schedules one refresh (the experiment page's reads only what changed) (debounced; one at a time, another after it when
// events came meanwhile), so a burst of reports costs one round of
// requests, not one per report. A page with pollMs is also refreshed that
// often (for changes that send no event).
//
// A page is an object with refresh() (fetch and draw; throws on failure),
// wants(type, data) (does this event change what it shows?) and optionally
// pollMs. Its constructor gets the element to draw in and a function that
// refreshes it now (for its own controls, e.g. a pager).
import { ApiError, setToken, subscribe, takeTokenFromUrl } from './api.js';
import { disposeCharts } from './charts.js';
import { html, setHtml } from './dom.js';
import { ExperimentsPage } from './pages/experiments.js';
import { ExperimentPage } from './pages/experiment.js';
import { FleetPage } from './pages/fleet.js';
import { TrialPage } from './pages/trial.js';

const REFRESH_DEBOUNCE_MS = 700;
const root = document.getElementById('view');
let page = null;
let generation = 0;  // bumped per page shown; results for an earlier page are dropped
let poll = null;

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const t = hash.match(/^\/experiments\/(\d+)\/trials\/(\d+)$/);
  if (t) return { nav: 'experiments', make: () => new TrialPage(root, Number(t[1]), Number(t[2])) };
  const m = hash.match(/^\/experiments\/(\d+)$/);
  if (m) return { nav: 'experiments', make: () => new ExperimentPage(root, Number(m[1]), refreshNow) };
  if (hash === '/fleet') return { nav: 'fleet', make: () => new FleetPage(root, refreshNow) };
  return { nav: 'experiments', make: () => new ExperimentsPage(root, refreshNow) };
}

function show() {
  const r = route();
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === r.nav);
  disposeCharts();
  clearInterval(poll);
  clearTimeout(timer);
  timer = null;
  generation++;
  page = r.make();
  if (page.pollMs) poll = setInterval(scheduleRefresh, page.pollMs);
  root.dataset.route = location.hash;  // with renders: the tests wait for this route's first render
  root.dataset.renders = '0';
  setHtml(root, html`<p class="muted">Loading…</p>`);
  refreshNow();
}

// Refreshes the page; a failure replaces it with the message. The tests
// wait on root.dataset.renders, the number of completed refreshes of the
// route in root.dataset.route.
async function refresh() {
  const mine = generation;
  try {
    const start = performance.now();
    await page.refresh();
    if (mine !== generation) return;
    // For bench/dashboard_bench.mjs: how long the last refresh took, its reads and drawing.
    root.dataset.refreshMs = (performance.now() - start).toFixed(1);
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
let inFlight = null;  // the generation whose refresh is running, or null
let again = false;    // an event came during that refresh

async function refreshNow() {
  const mine = generation;
  if (inFlight === mine) {
    again = true;
    return;
  }
  inFlight = mine;
  await refresh();
  if (inFlight === mine) inFlight = null;
  if (again && mine === generation) {
    again = false;
    scheduleRefresh();
  }
}

function scheduleRefresh() {
  if (inFlight === generation) {
    again = true;
    return;
  }
  if (timer) return;
  timer = setTimeout(() => {
    timer = null;
    refreshNow();
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

// Stored XSS: every name the API hands the dashboard is someone else's input
// (whoever submits an experiment or runs a worker), so the dashboard must
// show it as text. The test puts script payloads
//   <img src=x onerror="window.__xss='FIELD'">  <script>window.__xss='FIELD'</script>
//   "><svg onload="window.__xss='FIELD'">
// into every such field, against a real hpo-server and a real hpo-worker:
//   * a client experiment: its name, a space's name, a parameter's name and
//     value, the objective's metric name, a trial's failure reason;
//   * a command experiment run by the worker: its name, its space's name,
//     argv[0] (the program's file is named with the payload; its base name
//     becomes the workload), a system parameter's name (the setting);
//   * the worker's label value, and its CPU model (so its device name and
//     device class) when this machine lets the test run it in a mount
//     namespace over a /proc/cpuinfo that says so (unshare; the worker reads
//     the real /proc/cpuinfo and has no flag for another);
//   * a second worker written straight into the store (hpo-worker cannot
//     choose its host name): host, label, device name and device class, and
//     a measured speed of the command's workload, so the system-tuning view
//     shows that device class whether or not the namespace was possible.
// Then in headless Chromium it visits every page (experiments, both
// experiments, two trials' pages, fleet), hovers the system-tuning chart with the mouse and
// shows every chart's tooltip for every data item (dispatchAction showTip,
// the path a hover takes), and asserts that
//   * no element that could run script (script, img, svg, iframe, object,
//     embed, anything with an on* attribute) was ever added to the page (a
//     MutationObserver records them; this does not depend on when an image
//     error fires);
//   * window.__xss was never set;
//   * each payload is on the page as text (in the DOM or in a tooltip), so
//     the test cannot pass because nothing was drawn.
// It does that twice: with the page's Content-Security-Policy bypassed, which
// tests the escaping alone, and with it enforced, where it also asserts that
// nothing violated the policy (ECharts works under it) and that the policy
// blocks an inline handler. Usage (ctest runs it, see tests/web/CMakeLists.txt):
//   node tests/web/xss.test.mjs --server build/server/hpo-server \
//     --worker build/worker/hpo-worker --web-root web --out build/web-screenshots-xss
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { launchChromium, log, Processes, rendered, startServer, testArgs, waitFor } from './harness.mjs';

const args = testArgs();
const TOKEN = 'xss-test-token';
const procs = new Processes('hpo-xss-');
const { dir } = procs;

// The payloads for one field, joined into one name. Each sets window.__xss
// to the field's name, so a failure says where the hole is. A file name and
// hence argv[0]'s base name cannot hold '/', so `slash: false` leaves out the
// payload with </script>.
function evil(field, { slash = true } = {}) {
  return [`<img src=x onerror="window.__xss='${field}'">`, `<script>window.__xss='${field}'</script>`,
          `"><svg onload="window.__xss='${field}'">`].filter((p) => slash || !p.includes('/')).join(' ');
}

const EXPERIMENT = evil('experiment');
const SPACE = evil('space');
const PARAM = evil('param');
const VALUE = evil('value');
const METRIC = evil('metric');
const REASON = evil('reason');
const COMMAND_EXPERIMENT = evil('command-experiment');
const COMMAND_SPACE = evil('command-space');
const PROGRAM = evil('argv0', { slash: false });
const SYSTEM = evil('system');
const LABEL = evil('label');
const CPU_MODEL = evil('cpu-model');
const HOST = evil('host');
const DEVICE = evil('device-name');
const DEVICE_CLASS = evil('device-class');

const { base, ports, db, api } = await startServer(procs,
                                                   { server: args.server, webRoot: args['web-root'], token: TOKEN });

// --- a client experiment --------------------------------------------------
const client = await api('POST', '/api/v1/experiments', {
  name: EXPERIMENT, objective: { metric: METRIC, direction: 'minimize' },
  spaces: [{ name: SPACE, params: { [PARAM]: { type: 'categorical', choices: [VALUE, 'plain'] },
                                    x: { type: 'float', low: 0, high: 1 } } }],
  algorithm: { sampler: 'random', seed: 7 },
  budget: { max_trials: 8, max_parallel: 8, steps_per_trial: 3 },
  executor: { client: {} },
});
const { trials } = await api('POST', `/api/v1/experiments/${client.id}/trials:suggest`, { count: 8 });
assert.equal(trials.length, 8);
assert.ok(trials.some((t) => t.params[PARAM] === VALUE), 'a trial has the payload value (else change the seed)');
for (const [i, t] of trials.entries()) {
  for (let step = 0; step < 3; step++) {
    await api('POST', `/api/v1/trials/${t.id}/measurements`,
              { step, metrics: { [METRIC]: t.params.x + (t.params[PARAM] === VALUE ? 0 : 0.5) + 1 / (step + 1) } });
  }
  if (i === 0) await api('POST', `/api/v1/trials/${t.id}:fail`, { reason: REASON });
  else await api('POST', `/api/v1/trials/${t.id}:complete`, {});
}

// --- a command experiment, run by a real worker ---------------------------
const program = path.join(dir, PROGRAM);
fs.writeFileSync(program, `#!/bin/sh
for step in 1 2 3; do echo "hpo: step=$step loss=0.$step samples_per_sec=$((100 + step))"; done
`, { mode: 0o755 });
const command = await api('POST', '/api/v1/experiments', {
  name: COMMAND_EXPERIMENT, objective: { metric: 'loss' },
  spaces: [{ name: COMMAND_SPACE, params: { x: { type: 'float', low: 0, high: 1 } } }],
  system: { [SYSTEM]: { type: 'int', low: 1, high: 4 } },
  algorithm: { sampler: 'random', seed: 5 },
  budget: { max_trials: 3, max_parallel: 1, steps_per_trial: 3 },
  executor: { command: { argv: [program], timeout_s: 60 } },
});
// Engine::Workload (argv[0]'s base name, the space and a hash), as the
// server names it.
const commandTuning = await api('GET', `/api/v1/experiments/${command.id}/system-tuning`);
assert.equal(commandTuning.workloads.length, 1, JSON.stringify(commandTuning));
const WORKLOAD = commandTuning.workloads[0].workload;
assert.ok(WORKLOAD.startsWith(`${PROGRAM}/${COMMAND_SPACE}@`), WORKLOAD);

// The worker in its own user and mount namespaces, over a /proc/cpuinfo
// whose model name is the payload, when unshare may do that here (as root or
// with unprivileged user namespaces; a container may forbid both).
const real = fs.readFileSync('/proc/cpuinfo', 'utf8');
const fakeCpuinfo = path.join(dir, 'cpuinfo');
fs.writeFileSync(fakeCpuinfo, /^model name\s*:/m.test(real)
  ? real.replace(/^model name\s*:.*$/gm, `model name\t: ${CPU_MODEL}`) : `model name\t: ${CPU_MODEL}\n${real}`);
const NAMESPACE = ['--user', '--map-root-user', '--mount', '--', 'sh', '-c',
                   'mount --bind "$1" /proc/cpuinfo && shift && exec "$@"', 'sh', fakeCpuinfo];
let namespaced = true;
try {
  execFileSync('unshare', [...NAMESPACE, 'grep', '-qF', CPU_MODEL, '/proc/cpuinfo'], { stdio: 'ignore' });
} catch {
  namespaced = false;
}
const workerArgv = ['--server', `127.0.0.1:${ports.grpc}`, '--token', TOKEN, '--device', 'cpu',
                    '--labels', `pool=${LABEL}`, '--benchmark-seconds', '0.2'];
if (namespaced) {
  procs.start('unshare', [...NAMESPACE, args.worker, ...workerArgv], 'worker');
} else {
  log('unshare cannot bind-mount /proc/cpuinfo here: the CPU-model payload is left out ' +
      '(the stored worker below still carries a device name and class)');
  procs.start(args.worker, workerArgv, 'worker');
}

// A worker no hpo-worker could register (its host name is a payload), written
// into the store in the schema of sql/sqlite/, with a measured speed of the
// command's workload under a payload device class and system setting.
const q = (s) => `'${String(s).replaceAll("'", "''")}'`;
const now = Date.now();
execFileSync('sqlite3', [db], {
  input: `PRAGMA busy_timeout = 10000;
BEGIN IMMEDIATE;
INSERT INTO workers (host, labels, registered_ms, last_seen_ms)
VALUES (${q(HOST)}, ${q(JSON.stringify({ zone: LABEL }))}, ${now}, ${now});
INSERT INTO devices (worker_id, ordinal, kind, name, device_class, cores, memory_bytes, benchmark_gflops)
VALUES ((SELECT MAX(id) FROM workers), 0, 'cuda', ${q(DEVICE)}, ${q(DEVICE_CLASS)}, 1, 1073741824, 900);
INSERT INTO speed_observations (device_id, device_class, workload, system_setting, samples_per_sec, observed_ms)
SELECT (SELECT MAX(id) FROM devices), ${q(DEVICE_CLASS)}, ${q(WORKLOAD)}, ${q(JSON.stringify({ [SYSTEM]: 2 }))},
       v, ${now}
FROM (SELECT 250 AS v UNION ALL SELECT 260);
COMMIT;
`,
});

await waitFor('the worker to finish the command experiment', async () =>
  (await api('GET', `/api/v1/experiments/${command.id}`)).state !== 'running', 90000);
const tuning = await api('GET', `/api/v1/experiments/${command.id}/system-tuning`);
const classes = tuning.workloads.flatMap((w) => w.device_classes.map((c) => c.device_class));
assert.ok(classes.includes(DEVICE_CLASS), `the stored device's class is in the system tuning: ${classes}`);
if (namespaced) assert.ok(classes.some((c) => c.includes(CPU_MODEL)), `the worker's CPU model: ${classes}`);

// --- the browser ------------------------------------------------------------
const browser = await launchChromium(args);
fs.rmSync(args.out, { recursive: true, force: true });
fs.mkdirSync(args.out, { recursive: true });

// Records, from before the page's own script runs, every element added to the
// document that could run script, and every Content-Security-Policy
// violation.
function watchForInjection() {
  window.__injected = [];
  window.__cspViolations = [];
  document.addEventListener('securitypolicyviolation', (e) =>
    window.__cspViolations.push(`${e.violatedDirective}: ${e.sample || e.blockedURI}`));
  const RISKY = new Set(['SCRIPT', 'IMG', 'SVG', 'IFRAME', 'OBJECT', 'EMBED']);
  const risky = (el) => (RISKY.has(el.tagName.toUpperCase()) && !(el.tagName === 'SCRIPT' && el.src)) ||
                        [...el.attributes].some((a) => a.name.toLowerCase().startsWith('on'));
  new MutationObserver((records) => {
    for (const r of records) {
      for (const n of r.addedNodes) {
        if (n.nodeType !== Node.ELEMENT_NODE) continue;
        for (const el of [n, ...n.querySelectorAll('*')]) {
          if (risky(el)) window.__injected.push(el.outerHTML.slice(0, 200));
        }
      }
    }
  }).observe(document, { childList: true, subtree: true });
}

// Shows the tooltip of every data item of every series of chart `name` (at
// most 40 per series), as a hover would, and answers all their text.
// ECharts finds no point for a parallel series' data index, so its lines are
// shown at a pixel on each drawn line (getModel is ECharts' own, unexported
// API; only this test uses it).
function showEveryTooltip(page, name) {
  return page.evaluate((n) => {
    const c = window.hpoCharts.get(n);
    if (!c) throw new Error(`no chart ${n}`);
    const texts = [];
    c.getOption().series.forEach((s, seriesIndex) => {
      for (let dataIndex = 0; dataIndex < Math.min((s.data ?? []).length, 40); dataIndex++) {
        if (s.type === 'parallel') {
          const [a, b] = c.getModel().getSeriesByIndex(seriesIndex).getData().getItemGraphicEl(dataIndex).shape.points;
          c.dispatchAction({ type: 'showTip', x: (a[0] + b[0]) / 2, y: (a[1] + b[1]) / 2 });
        } else {
          c.dispatchAction({ type: 'showTip', seriesIndex, dataIndex });
        }
        texts.push(c.getDom().textContent);  // the canvas has none: this is the tooltip's
      }
    });
    c.dispatchAction({ type: 'hideTip' });
    return texts.join('\n');
  }, name);
}

async function textOf(page, selector) {
  return page.$eval(selector, (el) => el.textContent);
}

function assertShows(text, what, payloads) {
  for (const [field, p] of Object.entries(payloads)) {
    assert.ok(text.includes(p), `${what} shows the ${field} as text: ${p}\n--- it shows:\n${text.slice(0, 2000)}`);
  }
}

// What the page has added so far that could run script, and whether a
// payload ran; checked after each page, before its text.
async function assertClean(page, where) {
  const injected = await page.evaluate(() => window.__injected);
  assert.deepEqual(injected, [], `${where}: elements that can run script were added to the page`);
  assert.equal(await page.evaluate(() => window.__xss), undefined, `${where}: a payload ran (window.__xss)`);
}

// Every page, every chart's tooltips; the system-tuning chart hovered with
// the mouse.
async function visitEverything(page, pass, consoleErrors) {
  const visit = async (hash) => {
    await page.goto(`${base}/${hash}`);
    await rendered(page, 0, { consoleErrors });
  };

  await visit(`?token=${TOKEN}#/`);
  let text = await textOf(page, '#experiments');
  let tips = await showEveryTooltip(page, 'experiments.states');
  await assertClean(page, `${pass}, experiments`);
  assertShows(text, 'the experiments table', {
    'experiment name': EXPERIMENT, 'command experiment name': COMMAND_EXPERIMENT, 'space name': SPACE,
    'command space name': COMMAND_SPACE });
  assertShows(tips, 'the trials-by-state tooltips', { 'experiment name': EXPERIMENT });

  await visit(`#/experiments/${client.id}`);
  tips = '';
  for (const name of ['experiment.bestByTrial', 'experiment.bestByTime', 'experiment.curves', 'experiment.parallel',
                      'experiment.spaces', 'experiment.importance']) {
    tips += await showEveryTooltip(page, name);
  }
  await assertClean(page, `${pass}, the client experiment`);
  assertShows(await textOf(page, '#experiment h1'), 'the title', { 'experiment name': EXPERIMENT });
  assertShows(await textOf(page, '#summary'), 'the summary', { 'metric name': METRIC, 'space name': SPACE });
  assertShows(await textOf(page, '#filter-space'), 'the space filter', { 'space name': SPACE });
  assertShows(await textOf(page, '#parallel-space'), 'the parallel-coordinates space', { 'space name': SPACE });
  assertShows(await textOf(page, '#trials'), 'the trials table', {
    'metric name': METRIC, 'space name': SPACE, 'parameter name': PARAM, 'parameter value': VALUE, reason: REASON });
  assertShows(tips, 'the client experiment\'s tooltips', { 'space name': SPACE, 'parameter name': PARAM });
  // The learning curves' tooltips name the trial and its params (a DOM node).
  assertShows(await showEveryTooltip(page, 'experiment.curves'), 'the learning curves\' tooltips',
              { 'parameter name': PARAM, 'space name': SPACE });

  // Each trial's page: the failed one (its reason) and one with the payload value.
  for (const t of [trials[0], trials.find((x) => x.params[PARAM] === VALUE)]) {
    await visit(`#/experiments/${client.id}/trials/${t.number}`);
    tips = await showEveryTooltip(page, 'trial.values');
    await assertClean(page, `${pass}, trial #${t.number}`);
    const trialText = await textOf(page, '#trial');
    assertShows(trialText, `trial #${t.number}'s page`, {
      'experiment name': EXPERIMENT, 'space name': SPACE, 'parameter name': PARAM, 'metric name': METRIC,
      ...(t === trials[0] ? { reason: REASON } : {}), ...(t.params[PARAM] === VALUE ? { 'parameter value': VALUE } : {}) });
    assertShows(tips, `trial #${t.number}'s tooltips`, { 'metric name': METRIC });
  }

  await visit(`#/experiments/${command.id}`);
  // A real hover over the first point of the system-tuning chart.
  await page.locator('#tuning').scrollIntoViewIfNeeded();
  const [x, y] = await page.evaluate(() => {
    const c = window.hpoCharts.get('experiment.tuning');
    const data = c.getOption().series[0].data;
    const at = data.findIndex((d) => d !== null);
    const [px, py] = c.convertToPixel({ seriesIndex: 0 }, [at, data[at].value]);
    const r = c.getDom().getBoundingClientRect();
    return [r.left + px, r.top + py];
  });
  await page.mouse.move(x, y);
  await page.waitForFunction(() => document.getElementById('tuning').textContent.includes('observations'));
  const hovered = await textOf(page, '#tuning');
  await page.screenshot({ path: path.join(args.out, `system-tuning-${pass}.png`), fullPage: true });
  await page.mouse.move(0, 0);
  tips = await showEveryTooltip(page, 'experiment.tuning');
  for (const name of ['experiment.bestByTrial', 'experiment.curves', 'experiment.parallel', 'experiment.spaces']) {
    await showEveryTooltip(page, name);
  }
  await assertClean(page, `${pass}, the command experiment`);
  assertShows(await textOf(page, '#trials'), 'the command\'s trials table',
              { 'space name': COMMAND_SPACE, 'system parameter name': SYSTEM });
  assertShows(hovered, 'the hovered system-tuning tooltip', { workload: WORKLOAD });
  assertShows(tips, 'the system-tuning tooltips', {
    'device class': DEVICE_CLASS, workload: WORKLOAD, 'system parameter name': SYSTEM,
    ...(namespaced ? { 'CPU model': CPU_MODEL } : {}) });

  await visit('#/fleet');
  text = await textOf(page, '#workers');
  const speedTips = await showEveryTooltip(page, 'fleet.speed');
  const busyTips = await showEveryTooltip(page, 'fleet.utilization');
  await page.screenshot({ path: path.join(args.out, `fleet-${pass}.png`), fullPage: true });
  await assertClean(page, `${pass}, fleet`);
  assertShows(text, 'the workers table', {
    host: HOST, label: LABEL, 'device name': DEVICE, 'device class': DEVICE_CLASS, workload: WORKLOAD,
    'system parameter name': SYSTEM, ...(namespaced ? { 'CPU model': CPU_MODEL } : {}) });
  assertShows(speedTips, 'the speed tooltips', { workload: WORKLOAD });
  assertShows(busyTips, 'the utilization tooltips', { host: HOST });

  // An image that failed to load has fired its error event by the time its
  // request is answered: one more request to the server after them all.
  await page.evaluate(() => fetch('/style.css'));
}

async function run(pass, { bypassCSP }) {
  log(`pass: ${pass}`);
  const context = await browser.newContext({ bypassCSP, viewport: { width: 1440, height: 1000 } });
  await context.addInitScript(watchForInjection);
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
  page.on('pageerror', (e) => consoleErrors.push(e.message));
  try {
    await visitEverything(page, pass, consoleErrors);
    await assertClean(page, pass);
    assert.deepEqual(await page.evaluate(() => window.__cspViolations), [],
                     `${pass}: Content-Security-Policy violations`);
    assert.deepEqual(consoleErrors, [], `${pass}: errors in the browser console`);
    if (!bypassCSP) {
      // The policy is there and blocks an inline handler, whatever the
      // escaping does.
      const blocked = await page.evaluate(() => new Promise((resolve) => {
        const holder = document.createElement('div');
        holder.innerHTML = '<img src="x" onerror="window.__probe = 1">';
        holder.firstChild.addEventListener('error', () => resolve(window.__probe === undefined));
        document.body.append(holder);
      }));
      assert.ok(blocked, 'the Content-Security-Policy blocks an inline event handler');
    }
  } catch (e) {
    await page.screenshot({ path: path.join(args.out, `failure-${pass}.png`), fullPage: true }).catch(() => {});
    throw e;
  } finally {
    await context.close();
  }
}

let failed = false;
try {
  await run('escaping', { bypassCSP: true });
  await run('escaping-and-csp', { bypassCSP: false });
  log('ok');
} catch (e) {
  failed = true;
  console.error(e);
  procs.printLogs();
} finally {
  await browser.close();
  procs.removeDir();
}
process.exit(failed ? 1 : 0);

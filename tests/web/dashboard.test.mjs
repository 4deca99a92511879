// The dashboard in real headless Chromium (playwright-core) against a real
// hpo-server with a token, a real hpo-worker and data made through the API:
//   * experiments page: table rows and the trials-by-state chart;
//   * a finished client experiment (3 spaces, steps, pruned trials): every
//     chart holds data and paints pixels, the table sorts and filters, a
//     step reported on a running trial redraws its learning curve and none
//     of the charts of completed trials, and a trial completed over REST
//     shows up live, without a reload, read with ?since= (only what
//     changed), its curve moved to the completed ones;
//     the table shows a trial without final metrics by its last report
//     ("0.871 @ step 3"); a click on a pruned trial's row opens its page
//     (intermediate values, params, reason, measurements); the learning
//     curves switch to a log scale;
//   * a young experiment: with no trial, every chart says why it is empty;
//     with two completed trials, importance says it needs more, trial and
//     step ticks are integers, the time axis spans minutes not days, the
//     parallel-coordinate axes are the spec's bounds (width 64-256 on a
//     log axis) and the objective's range; hovering a learning curve names
//     its trial and a click opens the trial's page; at 10 completed trials
//     importance ranks the parameters;
//   * several objectives and a constraint: the front apart from dominated and
//     infeasible trials, its hypervolume over time, and a trial completed
//     over REST moving the front live;
//   * a command experiment run by the worker: system-parameter tuning, and
//     the table's train time from the trials' device time;
//   * fleet: the worker, its device, measured speed and running trial, and
//     the trial's end shown live; GFLOP/s on an axis of its own; with 13
//     workloads measured, the bars' labels do not overlap;
//   * on every page, every text a chart draws lies inside its canvas (no
//     cut axis titles) and no two overlap;
//   * 10,000 trials: the page loads and the table sorts (times printed as
//     `bench=dashboard ...`, not asserted tightly).
// Screenshots go to --out. Usage (ctest runs it, see tests/web/CMakeLists.txt):
//   node tests/web/dashboard.test.mjs --server build/server/hpo-server \
//     --worker build/worker/hpo-worker --web-root web --out build/web-screenshots
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {
  launchChromium, log, Processes, rendered as renderedPage, startServer, testArgs, waitFor,
} from './harness.mjs';

const args = testArgs();
const TOKEN = 'dashboard-test-token';
const procs = new Processes('hpo-dashboard-');
const { dir } = procs;
let failed = false;

// --- the server and the REST client ------------------------------------
const { base, ports, db, api } = await startServer(procs,
                                                   { server: args.server, webRoot: args['web-root'], token: TOKEN });

// --- data ---------------------------------------------------------------
// A client experiment over three spaces with per-step reports; the median
// rule prunes some. The last trial stays open for the live-update check.
const MIXED_TRIALS = 36;
const mixed = await api('POST', '/api/v1/experiments', {
  name: 'mixed-spaces', objective: { metric: 'loss', direction: 'minimize' },
  spaces: [
    { name: 'mlp', params: { lr: { type: 'float', low: 1e-4, high: 1, log: true }, width: { type: 'int', low: 8, high: 256 } } },
    { name: 'cnn', params: { lr: { type: 'float', low: 1e-4, high: 1, log: true },
                             optimizer: { type: 'categorical', choices: ['sgd', 'adam'] } } },
    { name: 'linear', params: { l2: { type: 'float', low: 0, high: 1 } } },
  ],
  algorithm: { sampler: 'tpe', seed: 3 },
  early_stopping: { rule: 'median', startup_trials: 4, warmup_steps: 2 },
  budget: { max_trials: MIXED_TRIALS, max_parallel: 4, steps_per_trial: 8 },
  executor: { client: {} },
});

function lossOf(t, step) {
  const p = t.params;
  const base = { mlp: Math.abs(Math.log10(p.lr ?? 1) + 2) * 0.3 + 64 / (p.width ?? 64) * 0.05,
                 cnn: Math.abs(Math.log10(p.lr ?? 1) + 2.5) * 0.25 + (p.optimizer === 'adam' ? 0 : 0.2),
                 linear: 0.6 + (p.l2 ?? 0) * 0.3 }[t.space];
  return base + 1 / (step + 1);
}

async function runTrial(t, { complete = true } = {}) {
  for (let step = 0; step < 8; step++) {
    const d = await api('POST', `/api/v1/trials/${t.id}/measurements`,
                        { step, metrics: { loss: lossOf(t, step) }, samples_per_sec: 100 });
    if (d.decision !== 'continue') return;
    if (!complete) return;  // one step: too early for the median rule to prune it
  }
  if (complete) await api('POST', `/api/v1/trials/${t.id}:complete`, {});
}

let open = null;
for (let made = 0; made < MIXED_TRIALS;) {
  const { trials } = await api('POST', `/api/v1/experiments/${mixed.id}/trials:suggest`, { count: 4 });
  for (const t of trials) {
    made++;
    if (made === MIXED_TRIALS) {
      open = t;
      await runTrial(t, { complete: false });
    } else {
      await runTrial(t);
    }
  }
}
const mixedTrials = (await api('GET', `/api/v1/experiments/${mixed.id}/trials?limit=1000`)).trials;
const pruned = mixedTrials.filter((t) => t.state === 'pruned').length;
log(`mixed-spaces: ${mixedTrials.length} trials, ${pruned} pruned`);
assert.ok(pruned > 0, 'the median rule pruned some trials');

// A command experiment run by a real worker: its program reports
// samples/s that grow with the co-tuned `threads`, so the server measures
// each setting per device class. Its second objective, the device time the
// server measures, gives it a front coloured by device class.
const script = path.join(dir, 'train.sh');
fs.writeFileSync(script, `#!/bin/sh
for step in 1 2 3 4 5 6; do
  threads=$(sed -n 's/.*"threads": *\\([0-9]*\\).*/\\1/p' "$HPO_SYSTEM_FILE")
  echo "hpo: step=$step loss=$(awk "BEGIN{print ($1-0.3)^2 + 1/$step}") samples_per_sec=$((100 * threads + 7 * step)) threads=$threads"
  sleep 0.05
done
`, { mode: 0o755 });
const tuned = await api('POST', '/api/v1/experiments', {
  name: 'co-tuned-command', objectives: [{ metric: 'loss' }, { metric: 'device_seconds' }],
  spaces: [{ name: 'quad', params: { x: { type: 'float', low: 0, high: 1 } } }],
  system: { threads: { type: 'int', low: 1, high: 4 } },
  algorithm: { sampler: 'random', seed: 5 },
  budget: { max_trials: 4, max_parallel: 1, steps_per_trial: 6 },
  executor: { command: { argv: [script, '{x}'], timeout_s: 60 } },
});
procs.start(args.worker, ['--server', `127.0.0.1:${ports.grpc}`, '--token', TOKEN, '--device', 'cpu',
                    '--labels', 'pool=test', '--benchmark-seconds', '0.2'], 'worker');

// 10,000 trials. Through REST that is 40,000 calls (minutes on 2 cores);
// this check is about reading them, so they are written straight into the
// SQLite file, in the schema of sql/sqlite/, in one transaction.
const BIG = 10000;
const big = await api('POST', '/api/v1/experiments', {
  name: 'ten-thousand', objective: { metric: 'loss' },
  spaces: [{ name: 'a', params: { x: { type: 'float', low: 0, high: 1 }, y: { type: 'int', low: 1, high: 64 } } },
           { name: 'b', params: { z: { type: 'categorical', choices: ['p', 'q', 'r'] } } }],
  algorithm: { sampler: 'random', seed: 1 }, budget: { max_trials: BIG, steps_per_trial: 5 },
  executor: { client: {} },
});
execFileSync('sqlite3', [db], {
  input: `PRAGMA busy_timeout = 10000;
BEGIN IMMEDIATE;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${BIG - 1})
INSERT INTO trials (experiment_id, space_id, number, params, system_params, state, priority, attempt,
                    created_ms, started_ms, finished_ms, updated_ms, final_metrics, reason)
SELECT ${big.id}, (SELECT id FROM search_spaces WHERE experiment_id = ${big.id} AND name = IIF(i % 3 = 0, 'b', 'a')),
       i,
       IIF(i % 3 = 0, json_object('z', IIF(i % 2 = 0, 'p', 'q')), json_object('x', (i * 37 % 1000) / 1000.0, 'y', 1 + i % 64)),
       '{}', IIF(i % 5 = 0, 'pruned', 'completed'), IIF(i % 3 = 0, 0.3, 0.7), 1,
       1700000000000 + i * 1000, 1700000000000 + i * 1000, 1700000000000 + i * 1000 + 900, 1700000000000 + i * 1000 + 900,
       json_object('loss', ((i * 37 % 1000) / 1000.0 - 0.3) * ((i * 37 % 1000) / 1000.0 - 0.3) + (i % 7) / 100.0),
       IIF(i % 5 = 0, 'pruned by median at step 2', '')
FROM n;
WITH RECURSIVE s(step) AS (SELECT 0 UNION ALL SELECT step + 1 FROM s WHERE step < 4)
INSERT INTO measurements (trial_id, step, metrics, created_ms)
SELECT t.id, s.step, json_object('loss', json_extract(t.final_metrics, '$.loss') + 1.0 / (s.step + 1)), t.finished_ms
FROM trials t, s WHERE t.experiment_id = ${big.id} AND (t.state = 'completed' OR s.step <= 2);
UPDATE experiments SET next_number = ${BIG}, state = 'completed', reason = 'budget reached',
       finished_ms = updated_ms WHERE id = ${big.id};
COMMIT;
`,
});
log(`ten-thousand: ${BIG} trials written`);

// --- the browser ----------------------------------------------------------
const browser = await launchChromium(args);
const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
const consoleErrors = [];
page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
page.on('pageerror', (e) => consoleErrors.push(e.message));
fs.rmSync(args.out, { recursive: true, force: true });  // no screenshots of an earlier run
fs.mkdirSync(args.out, { recursive: true });

async function screenshot(name) {
  const file = path.join(args.out, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot ${path.resolve(file)}`);
}

// Waits for the page's next completed render (app.js counts them).
function rendered(after = 0, timeout = 60000) {
  return renderedPage(page, after, { timeout, consoleErrors });
}

// Does `action` (a click, or a navigation to another route of the loaded
// page, which changes only the hash) and waits for the new route's first
// render: the old route has rendered, so a wait for any render could return
// before the hash change reaches the page.
async function renderAfter(action) {
  const before = await page.$eval('#view', (v) => v.dataset.route);
  await action();
  await page.waitForFunction((r) => document.getElementById('view').dataset.route !== r, before);
  return rendered();
}

// What each registered chart draws: the data length of every series, and
// how many of its canvas pixels are painted.
async function drawn(name) {
  return page.evaluate((n) => {
    const c = window.hpoCharts.get(n);
    if (!c) return null;
    const series = c.getOption().series.map((s) => (s.data ?? []).length);
    const canvas = c.getDom().querySelector('canvas');
    const ctx = canvas.getContext('2d');
    const { data } = ctx.getImageData(0, 0, canvas.width, canvas.height);
    let painted = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted++;
    return { series, painted, pixels: canvas.width * canvas.height };
  }, name);
}

async function assertChart(name, check) {
  const d = await drawn(name);
  assert.ok(d, `chart ${name} exists`);
  assert.ok(d.painted > 0.002 * d.pixels, `chart ${name} paints pixels: ${d.painted} of ${d.pixels}`);
  check?.(d.series);
  log(`chart ${name}: series data ${JSON.stringify(d.series)}, ${d.painted} pixels painted`);
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

// The texts a chart draws on its canvas (axis names and labels, legends,
// bar labels), each with its box on the canvas, skipping those hidden.
// getZr() and the zrender tree are ECharts' own API; only tests use them.
function chartTexts(name) {
  return page.evaluate((n) => {
    const c = window.hpoCharts.get(n);
    const zr = c.getZr();
    const shown = (el) => {
      for (let e = el; e; e = e.parent) if (e.ignore || e.invisible) return false;
      return true;
    };
    const texts = [];
    for (const root of zr.storage.getRoots()) {
      root.traverse((el) => {
        if (el.type !== 'text' || !el.style.text || !shown(el)) return;
        const r = el.getBoundingRect().clone();
        const m = el.getComputedTransform();
        if (m) r.applyTransform(m);
        texts.push({ text: String(el.style.text), x: r.x, y: r.y, width: r.width, height: r.height });
      });
    }
    return { width: zr.getWidth(), height: zr.getHeight(), texts };
  }, name);
}

// Every text chart `name` draws lies inside its canvas (axis titles were
// cut to "tr", "st", "sa") and no two overlap (the fleet's bar labels did).
async function assertTextsFit(name) {
  const { width, height, texts } = await chartTexts(name);
  assert.ok(texts.length > 0, `chart ${name} draws text`);
  for (const t of texts) {
    assert.ok(t.x >= -0.5 && t.y >= -0.5 && t.x + t.width <= width + 0.5 && t.y + t.height <= height + 0.5,
              `chart ${name}: "${t.text}" lies inside its ${width}x${height} canvas: ${JSON.stringify(t)}`);
  }
  const overlap = (a, b) => a.x < b.x + b.width - 0.5 && b.x < a.x + a.width - 0.5 &&
                            a.y < b.y + b.height - 0.5 && b.y < a.y + a.height - 0.5;
  texts.forEach((a, i) => texts.slice(i + 1).forEach((b) => {
    assert.ok(!overlap(a, b), `chart ${name}: "${a.text}" and "${b.text}" overlap: ${JSON.stringify([a, b])}`);
  }));
}

const EXPERIMENT_CHARTS = ['experiment.bestByTrial', 'experiment.bestByTime', 'experiment.curves',
                           'experiment.parallel', 'experiment.spaces', 'experiment.importance'];

// Why each chart of the experiment page draws nothing, by its element's id
// (null: it draws).
function chartMessages() {
  return page.evaluate(() => Object.fromEntries(['best-trials', 'best-time', 'curves', 'parallel', 'spaces',
    'importance'].map((id) => [id, document.querySelector(`#${id} > .chart-empty`)?.textContent ?? null])));
}

// The values of an axis' ticks as drawn (ECharts' axis model).
function axisTicks(name, axis, index = 0) {
  return page.evaluate(([n, a, i]) => window.hpoCharts.get(n).getModel().getComponent(a, i).axis.scale.getTicks()
    .map((t) => t.value), [name, axis, index]);
}

// The number a table cell starts with ("0.871 @ step 3" -> 0.871).
const leadingNumber = (text) => Number.parseFloat(text);

try {
  // Without a token the page asks for one, and works once it has it.
  const stranger = await browser.newPage();
  await stranger.goto(`${base}/#/`);
  await stranger.waitForSelector('#token-form:not([hidden])');
  assert.match(await stranger.textContent('#view .error'), /bearer token/);
  await stranger.fill('#token-input', TOKEN);
  await Promise.all([stranger.waitForNavigation(), stranger.click('#token-form button')]);
  await stranger.waitForSelector('#experiments tbody tr');
  await stranger.close();

  // The token arrives in the link, is kept, and leaves the address bar.
  await page.goto(`${base}/?token=${TOKEN}#/`);
  await rendered();
  assert.equal(new URL(page.url()).searchParams.get('token'), null);
  await page.waitForFunction(() => document.getElementById('live').textContent === 'live');
  assert.equal(await page.$$eval('#experiments tbody tr', (rows) => rows.length), 3);
  await assertChart('experiments.states', (s) => assert.deepEqual(s, Array(8).fill(3), 'eight states, three experiments'));
  await screenshot('experiments');

  // One experiment.
  await page.evaluate(() => { window.notReloaded = true; });
  let renders = await renderAfter(() => page.goto(`${base}/#/experiments/${mixed.id}`));
  const completed = mixedTrials.filter((t) => t.state === 'completed').length;
  await assertChart('experiment.bestByTrial', (s) => assert.deepEqual(s, [completed, completed]));
  await assertChart('experiment.bestByTime', (s) => assert.deepEqual(s, [completed, completed]));
  await assertChart('experiment.curves', (s) => {
    assert.equal(s[0] + s[1] + s[2], mixedTrials.length, 'a curve per trial');
    assert.equal(s[1], pruned, 'pruned curves apart');
    assert.equal(s[3], pruned, 'a marker where each pruned trial stopped');
  });
  const firstSpace = mixedTrials.filter((t) => t.space === 'mlp' && t.state === 'completed').length;
  await assertChart('experiment.parallel', (s) => assert.deepEqual(s, [firstSpace]));
  await assertChart('experiment.spaces', (s) => {
    assert.equal(s.length, 6, 'priority and share per space');
    assert.ok(s.every((n) => n > 0));
  });
  await assertChart('experiment.importance', (s) => assert.ok(s[0] >= 3, 'lr, width, optimizer, l2'));
  assert.equal(await page.$$eval('#trials tbody tr', (rows) => rows.length), mixedTrials.length);
  for (const name of EXPERIMENT_CHARTS) await assertTextsFit(name);
  assert.deepEqual(Object.values(await chartMessages()), Array(6).fill(null), 'no chart says it is empty');

  // The open trial has no final metrics: the table shows its last report,
  // with the step (the REST API's `latest`).
  const openCell = () => page.$eval(`#trials tbody tr[data-number="${open.number}"] td:nth-child(4)`,
                                    (td) => td.textContent);
  const openTrial = mixedTrials.find((t) => t.id === open.id);
  assert.deepEqual(openTrial.latest, { step: 0, metrics: { loss: lossOf(open, 0) } }, 'the REST API\'s last report');
  const lastReport = async (step) => {
    const m = (await openCell()).match(/^(\S+) @ step (\d+)$/);
    assert.ok(m, `a running trial's objective cell shows its last report and step: "${await openCell()}"`);
    assert.equal(Number(m[2]), step);
    assert.ok(Math.abs(Number(m[1]) - lossOf(open, step)) < 1e-3, `${m[1]} is the loss reported at step ${step}`);
  };
  await lastReport(0);
  assert.equal(await page.textContent('#trials th[data-sort="duration"]'), 'train time');

  // Sort by the objective, both ways; filter by state and by space.
  const objectiveCells = () => page.$$eval('#trials tbody tr td:nth-child(4)', (tds) => tds.map((td) => td.textContent));
  await page.click('#trials th[data-sort="objective"]');
  const ascending = (await objectiveCells()).filter((v) => v !== '–').map(leadingNumber);
  assert.deepEqual(ascending, [...ascending].sort((a, b) => a - b));
  await page.click('#trials th[data-sort="objective"]');
  const descending = (await objectiveCells()).filter((v) => v !== '–').map(leadingNumber);
  assert.deepEqual(descending, [...descending].sort((a, b) => b - a));
  await page.selectOption('#filter-state', 'pruned');
  assert.equal(await page.$$eval('#trials tbody tr', (rows) => rows.length), pruned);
  await page.selectOption('#filter-state', '');
  await page.selectOption('#filter-space', 'linear');
  const spaces = await page.$$eval('#trials tbody tr td:nth-child(3)', (tds) => tds.map((td) => td.textContent));
  assert.ok(spaces.length > 0 && spaces.every((s) => s === 'linear'));
  await page.selectOption('#filter-space', '');
  await page.selectOption('#parallel-space', 'cnn');
  await assertChart('experiment.parallel', (s) =>
    assert.deepEqual(s, [mixedTrials.filter((t) => t.space === 'cnn' && t.state === 'completed').length]));

  // Live: a step reported on the open (running) trial redraws its learning
  // curve, and none of the charts drawn from completed trials or from which
  // trials exist (web/js/pages/experiment.js redraws only what an update
  // touches).
  const redrawable = ['experiment.bestByTrial', 'experiment.bestByTime', 'experiment.curves', 'experiment.parallel',
                      'experiment.spaces', 'experiment.importance'];
  await page.evaluate((names) => {
    window.setOptionCalls = {};
    for (const name of names) {
      const c = window.hpoCharts.get(name);
      const setOption = c.setOption;
      window.setOptionCalls[name] = 0;
      c.setOption = function (...args) {
        window.setOptionCalls[name]++;
        return setOption.apply(this, args);
      };
    }
  }, redrawable);
  const curvePoints = async () => Number((await page.textContent('#curves-note')).match(/trials, (\d+) points/)[1]);
  const pointsBefore = await curvePoints();
  const step = await api('POST', `/api/v1/trials/${open.id}/measurements`, { step: 1, metrics: { loss: lossOf(open, 1) } });
  assert.equal(step.decision, 'continue');
  renders = await rendered(renders);
  const calls = await page.evaluate(() => window.setOptionCalls);
  assert.ok(calls['experiment.curves'] > 0, `the learning curves are redrawn: ${JSON.stringify(calls)}`);
  for (const name of redrawable.filter((n) => n !== 'experiment.curves')) {
    assert.equal(calls[name], 0, `a report on a running trial does not redraw ${name}: ${JSON.stringify(calls)}`);
  }
  assert.equal(await curvePoints(), pointsBefore + 1, 'the reported point is drawn');
  await lastReport(1);  // the table too, though the report does not bring the trial in the read

  // Live: finishing the open trial over REST updates the page in place.
  const stateOfOpen = () => page.$eval(`#trials tbody tr[data-number="${open.number}"] td:nth-child(2)`,
                                       (td) => td.textContent);
  assert.notEqual(await stateOfOpen(), 'completed');
  const before = await drawn('experiment.bestByTrial');
  const curvesBefore = await drawn('experiment.curves');
  // The live refresh reads only what changed: trials and curves since the
  // last read's cursor, not the whole experiment again.
  const reads = [];
  const onRequest = (r) => {
    const url = new URL(r.url());
    if (/\/experiments\/\d+\/(trials|measurements)$/.test(url.pathname)) reads.push(url);
  };
  page.on('request', onRequest);
  await api('POST', `/api/v1/trials/${open.id}:complete`, {});
  const t0 = Date.now();
  await page.waitForFunction((n) => {
    const row = document.querySelector(`#trials tbody tr[data-number="${n}"] td:nth-child(2)`);
    return row?.textContent === 'completed';
  }, open.number, { timeout: 15000 });
  renders = await rendered(renders);
  page.off('request', onRequest);
  log(`live update shown ${Date.now() - t0} ms after the trial completed`);
  assert.ok(reads.length >= 2, `the live refresh read trials and curves: ${reads.map(String)}`);
  for (const url of reads) {
    assert.ok(url.searchParams.get('since'), `a live read asks only for changes (since=): ${url}`);
  }
  assert.equal(await page.evaluate(() => window.notReloaded), true, 'no reload');
  const after = await drawn('experiment.bestByTrial');
  assert.equal(after.series[0], before.series[0] + 1, 'the completed trial is drawn');
  // Its curve moves from "running and other" to "completed", and the
  // completed curves, their series given new data, are still drawn.
  const curvesAfter = await drawn('experiment.curves');
  assert.deepEqual(curvesAfter.series.slice(0, 3), [curvesBefore.series[0] + 1, curvesBefore.series[1],
                                                    curvesBefore.series[2] - 1], 'the curve is drawn as completed');
  assert.ok(curvesAfter.painted > 0.9 * curvesBefore.painted,
            `the learning curves are all still drawn: ${curvesAfter.painted} pixels, ${curvesBefore.painted} before`);
  await page.waitForFunction(() => document.querySelector('#summary .state')?.textContent === 'completed');
  await screenshot('experiment');

  // The learning curves on a log scale, and back.
  const yAxisType = () => page.evaluate(() => window.hpoCharts.get('experiment.curves').getOption().yAxis[0].type);
  await page.check('#curves-log');
  assert.equal(await yAxisType(), 'log');
  await assertChart('experiment.curves');
  await assertTextsFit('experiment.curves');
  await page.locator('#curves').screenshot({ path: path.join(args.out, 'curves-log.png') });
  await page.uncheck('#curves-log');
  assert.equal(await yAxisType(), 'value');

  // A click on a pruned trial's row opens its page.
  const prunedTrial = mixedTrials.find((t) => t.state === 'pruned');
  const prunedDetail = await api('GET', `/api/v1/trials/${prunedTrial.id}`);
  await renderAfter(() => page.click(`#trials tbody tr[data-number="${prunedTrial.number}"]`));
  assert.equal(new URL(page.url()).hash, `#/experiments/${mixed.id}/trials/${prunedTrial.number}`);
  assert.match(await page.textContent('#trial h1'), new RegExp(`^Trial #${prunedTrial.number} of mixed-spaces`));
  assert.equal(await page.textContent('#trial-reason'), prunedDetail.reason);
  assert.ok(Math.abs(leadingNumber(await page.textContent('#trial-objective')) - prunedDetail.final_metrics.loss) < 1e-3,
            'the objective: its final value (a pruned trial keeps its last report)');
  assert.equal(await page.$$eval('#trial-measurements tbody tr', (rows) => rows.length),
               prunedDetail.measurements.length);
  const paramsText = await page.textContent('#trial-params');
  for (const name of Object.keys(prunedDetail.params)) assert.ok(paramsText.includes(name), `the params show ${name}`);
  await assertChart('trial.values', (s) => assert.deepEqual(s, [prunedDetail.measurements.length],
                                                            'the intermediate values: a point per step'));
  await assertTextsFit('trial.values');
  await screenshot('trial');
  assert.equal(await page.isHidden('#trial-log-panel'), true, 'no log tail for a pruned trial');

  // A failed trial whose reason carries its program's output: the first
  // line in the summary, the rest as its log tail.
  const failing = await api('POST', '/api/v1/experiments', {
    name: 'failing', objective: { metric: 'loss' },
    spaces: [{ name: 's', params: { x: { type: 'float', low: 0, high: 1 } } }],
    budget: { max_trials: 1, max_parallel: 1, steps_per_trial: 2 }, executor: { client: {} },
  });
  const [doomed] = (await api('POST', `/api/v1/experiments/${failing.id}/trials:suggest`, { count: 1 })).trials;
  await api('POST', `/api/v1/trials/${doomed.id}:fail`,
            { reason: 'exit code 1\nTraceback (most recent call last):\nValueError: loss is nan' });
  await renderAfter(() => page.goto(`${base}/#/experiments/${failing.id}/trials/${doomed.number}`));
  assert.equal(await page.textContent('#trial-reason'), 'exit code 1');
  assert.equal(await page.isHidden('#trial-log-panel'), false);
  assert.equal(await page.textContent('#trial-log'), 'Traceback (most recent call last):\nValueError: loss is nan');

  // A young experiment: every chart with nothing to draw says why, and the
  // axes fit a handful of trials.
  const young = await api('POST', '/api/v1/experiments', {
    name: 'young', objective: { metric: 'accuracy', direction: 'maximize' },
    spaces: [{ name: 'main', params: {
      width: { type: 'int', low: 64, high: 256, log: true }, lr: { type: 'float', low: 1e-4, high: 0.1, log: true },
      optimizer: { type: 'categorical', choices: ['sgd', 'adam'],
                   conditional: { sgd: { momentum: { type: 'float', low: 0, high: 0.99 } } } } } }],
    algorithm: { sampler: 'random', seed: 2 },
    budget: { max_trials: 20, max_parallel: 10, steps_per_trial: 3 },
    executor: { client: {} },
  });
  renders = await renderAfter(() => page.goto(`${base}/#/experiments/${young.id}`));
  assert.deepEqual(await chartMessages(), {
    'best-trials': 'no completed trial yet: each completed trial is a dot here',
    'best-time': 'no completed trial yet: each completed trial is a dot here',
    curves: 'no trial has reported a step yet: each trial\'s reports draw a curve here',
    parallel: 'no completed trial in space main yet: each completed trial is a line here',
    spaces: 'no trial created yet',
    importance: 'importance needs at least 10 completed trials; 0 so far',
  });
  await screenshot('experiment-empty');
  // Two completed trials and a running one, shown live.
  const accuracy = (i, step) => 0.6 + 0.1 * i + 0.05 * step;
  const youngTrials = (await api('POST', `/api/v1/experiments/${young.id}/trials:suggest`, { count: 3 })).trials;
  for (const [i, t] of youngTrials.entries()) {
    for (let step = 0; step < (i === 2 ? 1 : 3); step++) {
      await api('POST', `/api/v1/trials/${t.id}/measurements`, { step, metrics: { accuracy: accuracy(i, step) } });
    }
    if (i < 2) await api('POST', `/api/v1/trials/${t.id}:complete`, {});
  }
  await page.waitForFunction(() => document.querySelector('#importance > .chart-empty')?.textContent ===
                             'importance needs at least 10 completed trials; 2 so far', null, { timeout: 15000 });
  await page.waitForFunction(() => !document.querySelector('#curves > .chart-empty'), null, { timeout: 15000 });
  assert.deepEqual(await chartMessages(), {
    'best-trials': null, 'best-time': null, curves: null, parallel: null, spaces: null,
    importance: 'importance needs at least 10 completed trials; 2 so far',
  });
  const youngDone = (await api('GET', `/api/v1/experiments/${young.id}/trials`)).trials;
  // Integer trial and step ticks (not "trial 0.2").
  for (const [name, axis] of [['experiment.bestByTrial', 'xAxis'], ['experiment.spaces', 'xAxis'],
                              ['experiment.curves', 'xAxis']]) {
    const ticks = await axisTicks(name, axis);
    assert.ok(ticks.length >= 2 && ticks.every(Number.isInteger), `${name}: integer ticks ${ticks}`);
  }
  // Two trials finished within a second: the time axis spans about a
  // minute around them, not two days.
  const finished = youngDone.filter((t) => t.finished_ms).map((t) => t.finished_ms);
  const [timeLo, timeHi] = await page.evaluate(() => window.hpoCharts.get('experiment.bestByTime').getModel()
    .getComponent('xAxis', 0).axis.scale.getExtent());
  assert.ok(timeLo <= Math.min(...finished) && timeHi >= Math.max(...finished), 'the finishing times are on the axis');
  assert.ok(timeHi - timeLo <= 5 * 60000, `the time axis spans ${(timeHi - timeLo) / 1000} s`);
  // Parallel coordinates: each parameter on the spec's bounds, log where it
  // is log; the objective on the completed trials' range.
  const axes = await page.evaluate(() => {
    const c = window.hpoCharts.get('experiment.parallel');
    return c.getOption().parallelAxis.map((a, i) => {
      const axis = c.getModel().getComponent('parallelAxis', i).axis;
      return { name: a.name, type: axis.type, extent: axis.scale.getExtent(),
               labels: axis.getViewLabels().map((l) => l.formattedLabel) };
    });
  });
  const axis = (name) => axes.find((a) => a.name === name);
  assert.deepEqual(axes.map((a) => a.name), ['lr', 'momentum', 'optimizer', 'width', 'accuracy']);
  assert.equal(axis('width').type, 'log');
  assert.deepEqual(axis('width').labels, ['64', '128', '256'], 'width on 64-256, not 10-10,000');
  assert.equal(axis('lr').type, 'log');
  assert.deepEqual([axis('lr').labels[0], axis('lr').labels.at(-1)], ['0.0001', '0.1']);
  assert.deepEqual(axis('momentum').extent, [0, 0.99]);
  assert.deepEqual(axis('optimizer').labels, ['sgd', 'adam'], 'every choice, in the spec\'s order');
  const youngAccuracies = youngDone.filter((t) => t.state === 'completed').map((t) => t.final_metrics.accuracy);
  assert.deepEqual(axis('accuracy').extent, [Math.min(...youngAccuracies), Math.max(...youngAccuracies)],
                   'the objective on its values\' range (not 0.4-1.4)');
  for (const name of EXPERIMENT_CHARTS) await assertTextsFit(name);
  // The running trial: its last report, with its step.
  assert.equal(await page.$eval(`#trials tbody tr[data-number="${youngTrials[2].number}"] td:nth-child(4)`,
                                (td) => td.textContent), `${accuracy(2, 0)} @ step 0`);
  await screenshot('experiment-young');
  // Hovering a learning curve names its trial; a click opens the trial.
  const [hx, hy] = await page.evaluate(([a, b]) => {
    const c = window.hpoCharts.get('experiment.curves');
    const [px, py] = c.convertToPixel({ gridIndex: 0 }, [0.5, (a + b) / 2]);
    const r = c.getDom().getBoundingClientRect();
    return [r.left + px, r.top + py];
  }, [accuracy(0, 0), accuracy(0, 1)]);
  await page.locator('#curves').scrollIntoViewIfNeeded();
  await page.mouse.move(hx, hy);
  await page.waitForFunction(() => document.getElementById('curves').textContent.includes('trial #'));
  const tip = await page.textContent('#curves');
  assert.match(tip, new RegExp(`trial #${youngTrials[0].number} completed`), `the tooltip names the trial: ${tip}`);
  assert.ok(tip.includes(`width=${youngTrials[0].params.width}`), `the tooltip shows its params: ${tip}`);
  await renderAfter(() => page.mouse.click(hx, hy));
  assert.equal(new URL(page.url()).hash, `#/experiments/${young.id}/trials/${youngTrials[0].number}`);
  await assertChart('trial.values', (s) => assert.deepEqual(s, [3]));
  // Ten completed trials: importance ranks the parameters.
  for (const t of (await api('POST', `/api/v1/experiments/${young.id}/trials:suggest`, { count: 8 })).trials) {
    await api('POST', `/api/v1/trials/${t.id}/measurements`,
              { step: 0, metrics: { accuracy: 0.5 + 0.4 * Math.log2(t.params.width / 64) / 2 } });
    await api('POST', `/api/v1/trials/${t.id}:complete`, {});
  }
  await renderAfter(() => page.goto(`${base}/#/experiments/${young.id}`));
  assert.equal((await chartMessages()).importance, null, 'importance is shown at 10 completed trials');
  await assertChart('experiment.importance', (s) => assert.ok(s[0] >= 3));
  assert.equal(await page.evaluate(() => window.hpoCharts.get('experiment.importance').getOption().yAxis[0].data[0]),
               'width (10)', 'the parameter the accuracy depends on ranks first');

  // Several objectives and a constraint: the front, set apart from the
  // dominated and the infeasible trials, its hypervolume over time, and a
  // trial that moves the front shown live.
  const front = await api('POST', '/api/v1/experiments', {
    name: 'front', objectives: [{ metric: 'loss' }, { metric: 'accuracy', direction: 'maximize' }],
    constraints: [{ metric: 'size', max: 5 }],
    spaces: [{ name: 'main', params: { x: { type: 'float', low: 0, high: 1 } } }],
    algorithm: { sampler: 'random', seed: 4 },
    budget: { max_trials: 8, max_parallel: 8, steps_per_trial: 1 },
    executor: { client: {} },
  });
  const frontTrials = (await api('POST', `/api/v1/experiments/${front.id}/trials:suggest`, { count: 6 })).trials;
  // loss, accuracy, size: three on the front, one dominated, one too big;
  // the sixth comes later.
  const finals = [[1, 0.8], [2, 0.9], [0.9, 0.75], [2.5, 0.7], [0.1, 0.99, 9]];
  for (const [i, [loss, accuracy, size = 3]] of finals.entries()) {
    await api('POST', `/api/v1/trials/${frontTrials[i].id}:complete`, { metrics: { loss, accuracy, size } });
  }
  await renderAfter(() => page.goto(`${base}/#/experiments/${front.id}`));
  await assertChart('experiment.front', (s) => assert.deepEqual(s, [3, 1, 1], 'front, dominated, infeasible'));
  await assertChart('experiment.hypervolume', (s) => assert.deepEqual(s, [4], 'one point per feasible trial'));
  assert.equal(await page.textContent('#front-note'), '3 on the front of 4 feasible, 5 completed');
  const frontNumbers = () => page.evaluate(() => window.hpoCharts.get('experiment.front').getOption().series[0].data
    .map((d) => d.number).sort((a, b) => a - b));
  assert.deepEqual(await frontNumbers(), [0, 1, 2].map((i) => frontTrials[i].number));
  await assertTextsFit('experiment.front');
  await screenshot('experiment-front');
  // A trial better than two of the front in both objectives (not the
  // third), completed over REST, moves the front without a reload.
  await api('POST', `/api/v1/trials/${frontTrials[5].id}:complete`,
            { metrics: { loss: 0.85, accuracy: 0.85, size: 1 } });
  await page.waitForFunction(() => window.hpoCharts.get('experiment.front').getOption().series[0].data.length === 2,
                             null, { timeout: 15000 });
  assert.deepEqual(await frontNumbers(), [1, 5].map((i) => frontTrials[i].number).sort((a, b) => a - b));
  const hv = await page.evaluate(() => window.hpoCharts.get('experiment.hypervolume').getOption().series[0].data
    .map(([, v]) => v));
  assert.equal(hv.length, 5);
  assert.ok(hv.every((v, i) => i === 0 || v >= hv[i - 1]) && hv[4] > hv[3], `the hypervolume grows: ${hv}`);

  // The worker's experiment: system-parameter tuning per device class.
  await waitFor('the worker to finish the command experiment', async () =>
    (await api('GET', `/api/v1/experiments/${tuned.id}`)).state !== 'running', 90000);
  const tuning = await api('GET', `/api/v1/experiments/${tuned.id}/system-tuning`);
  // threads is the only system parameter: one line (no searched batch size),
  // a point per thread count tried.
  const buckets = tuning.workloads[0].device_classes[0]?.buckets ?? [];
  assert.equal(buckets.length, 1, `one line: ${JSON.stringify(tuning)}`);
  assert.equal(buckets[0].batch_size, null);
  const points = buckets[0].points;
  assert.ok(points.length >= 2, `several thread counts measured: ${JSON.stringify(tuning)}`);
  await renderAfter(() => page.goto(`${base}/#/experiments/${tuned.id}`));
  await assertChart('experiment.tuning', (s) => assert.deepEqual(s, [points.length]));
  const xAxis = await page.evaluate(() => window.hpoCharts.get('experiment.tuning').getOption().xAxis[0]);
  assert.equal(xAxis.name, 'threads', 'the tuned parameter is on the x axis');
  assert.deepEqual(xAxis.data, [...points].sort((a, b) => a.tunables.threads - b.tunables.threads)
    .map((p) => `threads=${p.tunables.threads}`), 'thread counts in their order');
  await assertChart('experiment.curves', (s) => assert.equal(sum(s.slice(0, 3)), 4));
  // Train time: the trial's device time, when the server measured one.
  const ran = (await api('GET', `/api/v1/experiments/${tuned.id}/trials`)).trials.find((t) => t.device_seconds > 0);
  assert.ok(ran, 'the worker measured the trials\' device time');
  assert.equal(await page.$eval(`#trials tbody tr[data-number="${ran.number}"] td:nth-child(8)`, (td) => td.textContent),
               `${ran.device_seconds.toFixed(1)} s`);
  for (const name of [...EXPERIMENT_CHARTS, 'experiment.tuning']) await assertTextsFit(name);
  // Its front: every point in the colour of the device class that trained
  // it (one worker, so one class and one colour), named under the chart.
  assert.equal(ran.device_class, (await api('GET', `/api/v1/trials/${ran.id}`)).devices[0].device_class);
  const frontColors = await page.evaluate(() => window.hpoCharts.get('experiment.front').getOption().series
    .flatMap((s) => s.data.map((d) => d.itemStyle?.color ?? null)));
  const tunedTrials = (await api('GET', `/api/v1/experiments/${tuned.id}/trials`)).trials;
  const tunedCompleted = tunedTrials.filter((t) => t.state === 'completed').length;
  assert.ok(tunedCompleted > 0 && frontColors.length === tunedCompleted, `every completed trial drawn: ${frontColors} of ${
    JSON.stringify(tunedTrials.map((t) => [t.state, t.final_metrics, t.device_class]))}`);
  assert.ok(frontColors[0] && frontColors.every((c) => c === frontColors[0]), `one class, one colour: ${frontColors}`);
  assert.ok((await page.textContent('#front-classes')).includes(ran.device_class),
            `the class is named under the front: ${await page.textContent('#front-classes')}`);
  await page.locator('#tuning').scrollIntoViewIfNeeded();
  await screenshot('experiment-system-tuning');
  // Its trial page names the device it ran on, as the server recorded it.
  const ranDetail = await api('GET', `/api/v1/trials/${ran.id}`);
  assert.equal(ranDetail.devices.length, 1, JSON.stringify(ranDetail.devices));
  await renderAfter(() => page.goto(`${base}/#/experiments/${tuned.id}/trials/${ran.number}`));
  const deviceRows = await page.$$eval('#trial-devices tbody tr', (rows) => rows.map((r) => r.textContent));
  assert.equal(deviceRows.length, 1, deviceRows.join('\n'));
  for (const want of [ranDetail.devices[0].host, ranDetail.devices[0].device_class, String(ranDetail.measurements.length)]) {
    assert.ok(deviceRows[0].includes(want), `the device row shows ${want}: ${deviceRows[0]}`);
  }
  assert.ok((await page.textContent('#trial-measurements tbody tr')).includes(ranDetail.devices[0].device_class),
            'each step names its device class');
  assert.ok((await page.textContent('#trial-events tbody')).length > 0);
  await screenshot('trial-on-a-worker');

  // Fleet, while the worker runs a slow trial.
  const slowScript = path.join(dir, 'slow.sh');
  fs.writeFileSync(slowScript, '#!/bin/sh\nfor step in $(seq 1 600); do echo "hpo: step=$step loss=1"; sleep 0.1; done\n',
                   { mode: 0o755 });
  const slow = await api('POST', '/api/v1/experiments', {
    name: 'slow-command', objective: { metric: 'loss' },
    spaces: [{ name: 's', params: { x: { type: 'float', low: 0, high: 1 } } }],
    budget: { max_trials: 1, max_parallel: 1, steps_per_trial: 600 },
    executor: { command: { argv: [slowScript], timeout_s: 120 } },
  });
  await waitFor('the worker to run the slow trial', async () =>
    (await api('GET', `/api/v1/experiments/${slow.id}`)).trials.running === 1);
  await renderAfter(() => page.goto(`${base}/#/fleet`));
  assert.equal(await page.$$eval('#workers tbody tr', (rows) => rows.length), 1);
  const workerRow = await page.$eval('#workers tbody tr', (tr) => tr.textContent);
  for (const want of ['pool=test', 'train.sh/quad', `experiment ${slow.id}`, 'trial #0']) {
    assert.ok(workerRow.includes(want), `the worker's row shows ${want}: ${workerRow}`);
  }
  assert.equal(await page.textContent('#utilization'), '100%');
  await assertChart('fleet.speed', (s) => assert.ok(s[0] >= 1 && s[1] >= 1));
  await assertChart('fleet.utilization', (s) => assert.deepEqual(s, [1]));
  // Two quantities, two axes: the GEMM benchmark's GFLOP/s is not drawn
  // on the samples/s axis.
  const speedOption = await page.evaluate(() => {
    const o = window.hpoCharts.get('fleet.speed').getOption();
    return { axes: o.xAxis.map((a) => a.name), series: o.series.map((x) => [x.name, x.xAxisIndex]) };
  });
  assert.deepEqual(speedOption, { axes: ['samples/s', 'GFLOP/s'],
                                  series: [['measured samples/s', 0], ['benchmark GFLOP/s', 1]] });
  await assertTextsFit('fleet.speed');
  await assertTextsFit('fleet.utilization');
  await screenshot('fleet');
  await api('POST', `/api/v1/experiments/${slow.id}:cancel`, {});
  // The cancel ends the trial (an event): the fleet page shows the worker idle.
  await page.waitForFunction(() => document.getElementById('utilization')?.textContent === '0%', null,
                             { timeout: 15000 });
  // Many workloads measured on the one device (written into the store, as
  // thirteen experiments' worth of speed reports): a bar each, their labels
  // apart (at 11 they overlapped).
  execFileSync('sqlite3', [db], {
    input: `PRAGMA busy_timeout = 10000;
INSERT INTO speed_observations (device_id, device_class, workload, system_setting, samples_per_sec, observed_ms)
SELECT (SELECT MIN(id) FROM devices), (SELECT device_class FROM devices ORDER BY id LIMIT 1),
       'experiment-' || (100 + i) || '/train.sh/quad', '{}', 100 + i, ${Date.now()}
FROM (WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 11) SELECT i FROM n);
`,
  });
  const fleetRenders = Number(await page.$eval('#view', (v) => v.dataset.renders));
  await rendered(fleetRenders, 20000);  // the page polls every 10 s
  await assertChart('fleet.speed', (s) => assert.ok(s[0] >= 13, `a bar per workload: ${s}`));
  await assertTextsFit('fleet.speed');
  await screenshot('fleet-many-workloads');

  // 10,000 trials.
  const loadStart = Date.now();
  await page.goto(`${base}/#/experiments/${big.id}`);
  await rendered(0, 120000);
  const loadMs = Date.now() - loadStart;
  await assertChart('experiment.curves', (s) => assert.equal(s[0] + s[1], BIG));
  await assertChart('experiment.bestByTrial', (s) => assert.equal(s[0], BIG - BIG / 5));
  assert.equal(await page.$$eval('#trials tbody tr', (rows) => rows.length), 50, 'one page of the table');
  const sortStart = Date.now();
  await page.click('#trials th[data-sort="objective"]');
  await page.waitForFunction(() => document.querySelector('#trials th[data-sort="objective"]').textContent.includes('▲'));
  const sortMs = Date.now() - sortStart;
  const frameMs = await page.evaluate(() => new Promise((resolve) => {
    const t = performance.now();
    requestAnimationFrame(() => resolve(performance.now() - t));
  }));
  console.log(`bench=dashboard trials=${BIG} load_ms=${loadMs} sort_ms=${sortMs} next_frame_ms=${frameMs.toFixed(0)}`);
  for (const name of EXPERIMENT_CHARTS) await assertTextsFit(name);
  await screenshot('experiment-10000-trials');

  assert.deepEqual(consoleErrors, [], 'no errors in the browser console');
  log('ok');
} catch (e) {
  failed = true;
  console.error(e);
  await screenshot('failure').catch(() => {});
  procs.printLogs();
} finally {
  await browser.close();
  procs.removeDir();
}
process.exit(failed ? 1 : 0);

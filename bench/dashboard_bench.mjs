// The dashboard at scale, in headless Chromium against a
// real hpo-server on SQLite: the first paint of an experiment with 10,000
// trials and 100,000 measurements, and the time to apply one live update.
//
//   first_paint_ms   page.goto(#/experiments/ID) until its first render is
//                    done (every chart and the table drawn: web/js/app.js
//                    counts renders in #view's data-renders)
//   table_ms         page.goto until the frame after the trials table got
//                    its first row, timed in the page (the page draws the
//                    summary and the table before the charts)
//   live_update_ms   the median over --updates live updates of the page's
//                    own refresh time (data-refreshMs: the ?since= reads
//                    plus merging and redrawing), each after one step
//                    reported over REST
//   event_to_screen_ms  the median time from that REST report returning to
//                    the refresh being drawn: live_update_ms plus the event's
//                    trip and the dashboard's debounce (700 ms on purpose:
//                    a burst of reports costs one refresh)
// Timings only: nothing is asserted. Run it alone, under the bench lock:
//   flock /tmp/hpo-bench.lock node bench/dashboard_bench.mjs --server build/server/hpo-server \
//     --web-root web --chromium /usr/bin/chromium [--trials 10000] [--steps 10] [--updates 5]
// The data is written straight into the SQLite file (40,000 REST calls
// would take minutes): trials - 1 completed trials of `steps` steps each; the
// last trial is suggested over REST and stays open for the live updates. Uses the browser tests' harness (tests/web/harness.mjs).
import { execFileSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { launchChromium, Processes, rendered, startServer } from '../tests/web/harness.mjs';

const { values: args } = parseArgs({
  options: {
    server: { type: 'string' }, 'web-root': { type: 'string' }, chromium: { type: 'string', default: '/usr/bin/chromium' },
    trials: { type: 'string' }, steps: { type: 'string' }, updates: { type: 'string' },
  },
});
for (const required of ['server', 'web-root']) {
  if (!args[required]) throw new Error(`--${required} is required`);
}
const TRIALS = Number(args.trials ?? 10000);
const STEPS = Number(args.steps ?? 10);
const UPDATES = Number(args.updates ?? 5);
const TOKEN = 'dashboard-bench-token';
const procs = new Processes('hpo-dashboard-bench-');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const { base, db, api } = await startServer(procs, { server: args.server, webRoot: args['web-root'], token: TOKEN });
const exp = await api('POST', '/api/v1/experiments', {
  name: 'dashboard-bench', objective: { metric: 'loss' },
  spaces: [{ name: 'a', params: { x: { type: 'float', low: 0, high: 1 }, y: { type: 'int', low: 1, high: 64 } } },
           { name: 'b', params: { z: { type: 'categorical', choices: ['p', 'q', 'r'] } } }],
  algorithm: { sampler: 'random', seed: 1 }, budget: { max_trials: TRIALS, max_parallel: 1, steps_per_trial: STEPS },
  executor: { client: {} },
});
execFileSync('sqlite3', [db], {
  input: `PRAGMA busy_timeout = 10000;
BEGIN IMMEDIATE;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ${TRIALS - 2})
INSERT INTO trials (experiment_id, space_id, number, params, system_params, state, priority, attempt,
                    created_ms, started_ms, finished_ms, updated_ms, final_metrics, reason)
SELECT ${exp.id}, (SELECT id FROM search_spaces WHERE experiment_id = ${exp.id} AND name = IIF(i % 3 = 0, 'b', 'a')),
       i,
       IIF(i % 3 = 0, json_object('z', IIF(i % 2 = 0, 'p', 'q')), json_object('x', (i * 37 % 1000) / 1000.0, 'y', 1 + i % 64)),
       '{}', 'completed', 0.5, 1,
       1700000000000 + i * 1000, 1700000000000 + i * 1000, 1700000000000 + i * 1000 + 900, 1700000000000 + i * 1000 + 900,
       json_object('loss', ((i * 37 % 1000) / 1000.0 - 0.3) * ((i * 37 % 1000) / 1000.0 - 0.3) + (i % 7) / 100.0), ''
FROM n;
WITH RECURSIVE s(step) AS (SELECT 0 UNION ALL SELECT step + 1 FROM s WHERE step < ${STEPS - 1})
INSERT INTO measurements (trial_id, step, metrics, created_ms)
SELECT t.id, s.step, json_object('loss', json_extract(t.final_metrics, '$.loss') + 1.0 / (s.step + 1)), t.finished_ms
FROM trials t, s WHERE t.experiment_id = ${exp.id};
UPDATE experiments SET next_number = ${TRIALS - 1} WHERE id = ${exp.id};
COMMIT;
`,
});
const measurements = Number(execFileSync('sqlite3', [db, 'SELECT COUNT(*) FROM measurements']).toString());
const [open] = (await api('POST', `/api/v1/experiments/${exp.id}/trials:suggest`, { count: 1 })).trials;

const browser = await launchChromium(args);
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  await page.goto(`${base}/?token=${TOKEN}#/`);
  await rendered(page);
  await page.waitForFunction(() => document.getElementById('live').textContent === 'live');
  // In the page, not from here: while the page draws its charts, an answer
  // from it waits.
  const pageStart = await page.evaluate(() => {
    new MutationObserver((_, observer) => {
      if (!document.querySelector('#trials tbody tr')) return;
      observer.disconnect();
      requestAnimationFrame(() => { window.tableShownAt = performance.now(); });
    }).observe(document.getElementById('view'), { childList: true, subtree: true });
    return performance.now();
  });
  const start = Date.now();
  await page.goto(`${base}/#/experiments/${exp.id}`);
  let renders = await rendered(page, 0, { timeout: 120000 });
  const firstPaintMs = Date.now() - start;
  const tableMs = Math.round(await page.evaluate(() => window.tableShownAt) - pageStart);

  const applied = [];
  const onScreen = [];
  for (let step = 0; step < UPDATES; step++) {
    await api('POST', `/api/v1/trials/${open.id}/measurements`, { step, metrics: { loss: 1 / (step + 1) } });
    const reported = Date.now();
    renders = await rendered(page, renders, { timeout: 60000 });
    onScreen.push(Date.now() - reported);
    applied.push(Number(await page.$eval('#view', (v) => v.dataset.refreshMs)));
  }
  console.log(`bench=dashboard trials=${TRIALS} measurements=${measurements + UPDATES} ` +
              `first_paint_ms=${firstPaintMs} live_update_ms=${median(applied).toFixed(0)} ` +
              `event_to_screen_ms=${median(onScreen)} updates=${UPDATES} table_ms=${tableMs}`);
} finally {
  await browser.close();
  procs.removeDir();
}
process.exit(0);  // ends the server too (Processes kills its children on exit), and frees the bench lock

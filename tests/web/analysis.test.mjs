// The dashboard's computations (web/js/analysis.js) under node:test.
import assert from 'node:assert/strict';
import test from 'node:test';

import {
  bestSoFar, bestTrial, CurveSet, dataRange, deviceClassColors, fleetUtilization, hypervolume2d, importance, importanceView,
  infeasibleReasons, MIN_IMPORTANCE_TRIALS, objectivesOf, paramAxis, paretoView, shownObjective, spaceHistory, specParams, tableRows, timeRange, trainMs, trialChanges, trialSeries,
  TrialSet,
} from '../../web/js/analysis.js';

const trial = (number, state, loss, params = {}, extra = {}) => ({
  number, state, params, space: 'a', priority: 0.5, final_metrics: loss === null ? null : { loss },
  started_ms: 1000 * number, finished_ms: 1000 * number + 500, ...extra,
});

test('best so far follows the direction and skips unfinished and pruned trials', () => {
  const trials = [trial(0, 'completed', 3), trial(1, 'pruned', 0.1), trial(2, 'completed', 2),
                  trial(3, 'running', null), trial(4, 'completed', 5)];
  assert.deepEqual(bestSoFar(trials, 'loss', 'minimize').byTrial, [[0, 3], [2, 2], [4, 2]]);
  assert.deepEqual(bestSoFar(trials, 'loss', 'maximize').byTrial, [[0, 3], [2, 3], [4, 5]]);
  assert.deepEqual(bestSoFar(trials, 'loss', 'minimize').byTime.map(([, v]) => v), [3, 2, 2]);
});

test('the best trial is the best completed one', () => {
  const trials = [trial(0, 'completed', 3), trial(1, 'pruned', 0.1), trial(2, 'completed', 2)];
  assert.equal(bestTrial(trials, 'loss', 'minimize').number, 2);
  assert.equal(bestTrial(trials, 'loss', 'maximize').number, 0);
  assert.equal(bestTrial([trial(0, 'running', null)], 'loss', 'minimize'), null);
});

test('importance finds the parameter that drives the objective', () => {
  const trials = [];
  for (let i = 0; i < 100; i++) {
    const x = i / 100;
    const noise = ((i * 7919) % 100) / 100;  // unrelated to the objective
    const color = ['red', 'green'][i % 2];   // categorical, no effect
    trials.push(trial(i, 'completed', 10 * x * x, { x, noise, color }));
  }
  const rows = importance(trials, 'loss');
  assert.equal(rows[0].param, 'x');
  assert.ok(rows[0].importance > 0.9, `x explains most: ${rows[0].importance}`);
  for (const r of rows.slice(1)) assert.ok(r.importance < 0.2, `${r.param}: ${r.importance}`);
  assert.equal(rows.find((r) => r.param === 'color').trials, 100);
});

test('importance leaves out parameters it cannot judge: under 4 trials, or a single value', () => {
  const trials = [0, 0, 0, 0, 1, 1].map((x, i) => trial(i, 'completed', x, { x, same: 3, only: i === 0 ? 1 : undefined }));
  for (const t of trials) if (t.params.only === undefined) delete t.params.only;
  const rows = importance(trials, 'loss');
  assert.deepEqual(rows.map((r) => r.param), ['x']);
  // Each x=0 trial is predicted exactly by its neighbours; each x=1 trial by
  // the other x=1 and an x=0 (k=2): 1 - 2 * 0.5^2 / (12/9).
  assert.ok(Math.abs(rows[0].importance - 0.625) < 1e-12, rows[0].importance);
});

// examples/quadratic-client.yaml as random sampling draws it: the loss
// depends on x alone; lr, optimizer and (for sgd) momentum do nothing.
function quadraticRun(n, seed) {
  let s = seed >>> 0;
  const random = () => {  // mulberry32
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return Array.from({ length: n }, (_, i) => {
    const params = { x: -5 + 10 * random(), lr: 10 ** (-5 + 5 * random()), optimizer: random() < 0.5 ? 'sgd' : 'adam' };
    if (params.optimizer === 'sgd') params.momentum = 0.99 * random();
    return trial(i, 'completed', (params.x - 1.5) ** 2 + 0.2, params);
  });
}

test('importance on the quadratic example: x first, from the minimum number of trials on', () => {
  // At 10 trials the in-sample share of binned means (eta squared, the old
  // estimator) put lr, optimizer or momentum at or above x in 16% of these
  // runs; the out-of-sample share puts one strictly above x in under 1%,
  // and ties (all at 0) are not ranked (importanceView below).
  const runs = 400;
  let above = 0;
  let xFirst = 0;
  for (let seed = 0; seed < runs; seed++) {
    const trials = quadraticRun(MIN_IMPORTANCE_TRIALS, seed);
    const all = importance(trials, 'loss');
    const x = all.find((r) => r.param === 'x').importance;
    if (all.some((r) => r.param !== 'x' && r.importance > x)) above++;
    const { rows, why } = importanceView(trials, 'loss');
    if (why === null && rows[0].param === 'x' && rows[0].importance > rows[1].importance) xFirst++;
  }
  console.log(`importance, quadratic at ${MIN_IMPORTANCE_TRIALS} trials: x first in ${xFirst} of ${runs}, ` +
              `another parameter above x in ${above}`);
  assert.ok(above / runs <= 0.02, `another parameter above x in ${above} of ${runs} runs`);
  assert.ok(xFirst / runs >= 0.95, `x ranked first in ${xFirst} of ${runs} runs`);
  // With more trials, every run.
  for (let seed = 0; seed < 100; seed++) {
    assert.equal(importanceView(quadraticRun(20, seed), 'loss').rows[0].param, 'x', `seed ${seed}`);
  }
});

test('importance says it does not know below the minimum number of completed trials', () => {
  // The six-trial run that ranked momentum above x: no ranking at all.
  const six = quadraticRun(6, 1);
  six.push(trial(6, 'pruned', 0.3, { x: 1 }), trial(7, 'running', null, { x: 2 }));
  assert.deepEqual(importanceView(six, 'loss'),
                   { rows: [], completed: 6, why: `importance needs at least ${MIN_IMPORTANCE_TRIALS} completed trials; 6 so far` });
  assert.equal(importanceView([], 'loss').why, `importance needs at least ${MIN_IMPORTANCE_TRIALS} completed trials; 0 so far`);
  // Enough trials, but no parameter predicts anything: no ranking either.
  const flat = Array.from({ length: 12 }, (_, i) => trial(i, 'completed', 1, { a: i, b: i % 3 }));
  assert.deepEqual(importanceView(flat, 'loss'),
                   { rows: [], completed: 12, why: 'no parameter alone predicts the objective yet (12 completed trials)' });
  const known = importanceView(quadraticRun(MIN_IMPORTANCE_TRIALS, 3), 'loss');
  assert.equal(known.why, null);
  assert.equal(known.rows[0].param, 'x');
});

test('space history: priorities as set and shares of trials so far', () => {
  const trials = [trial(0, 'completed', 1, {}, { space: 'a', priority: 0.5 }),
                  trial(1, 'completed', 1, {}, { space: 'b', priority: 0.5 }),
                  trial(2, 'completed', 1, {}, { space: 'a', priority: 0.8 }),
                  trial(3, 'pending', null, {}, { space: 'a', priority: 0.8 })];
  const h = spaceHistory(trials, ['a', 'b']);
  assert.deepEqual(h.a.priority, [[0, 0.5], [2, 0.8], [3, 0.8]]);
  assert.deepEqual(h.b.share, [[0, 0], [1, 0.5], [2, 1 / 3], [3, 0.25]]);
  const thinned = spaceHistory(Array.from({ length: 5000 }, (_, i) => trial(i, 'pending', null)), ['a'], 100);
  assert.ok(thinned.a.share.length <= 101);
  assert.deepEqual(thinned.a.share.at(-1), [4999, 1]);
});

test('table rows filter, sort either way, and keep missing values last', () => {
  const trials = [trial(0, 'completed', 3), trial(1, 'pruned', null), trial(2, 'completed', 1, {}, { space: 'b' })];
  const by = (o) => tableRows(trials, { metric: 'loss', ...o }).map((t) => t.number);
  assert.deepEqual(by({ sort: 'objective' }), [2, 0, 1]);
  assert.deepEqual(by({ sort: 'objective', descending: true }), [0, 2, 1]);
  assert.deepEqual(by({ state: 'completed' }), [0, 2]);
  assert.deepEqual(by({ space: 'b' }), [2]);
  // A trial with only a last report sorts by that report's value.
  trials.push(trial(3, 'paused', null, {}, { latest: { step: 2, metrics: { loss: 2 } } }));
  assert.deepEqual(by({ sort: 'objective' }), [2, 3, 0, 1]);
});

test('the objective shown: the final value, else the last report with its step', () => {
  assert.deepEqual(shownObjective(trial(0, 'completed', 0.5, {}, { latest: { step: 9, metrics: { loss: 0.6 } } }), 'loss'),
                   { value: 0.5, step: null });
  assert.deepEqual(shownObjective(trial(1, 'pruned', null, {}, { latest: { step: 3, metrics: { loss: 0.871 } } }), 'loss'),
                   { value: 0.871, step: 3 });
  // No report yet (latest null), another metric only, or a server without the field.
  assert.deepEqual(shownObjective(trial(2, 'paused', null, {}, { latest: null }), 'loss'), { value: null, step: null });
  assert.deepEqual(shownObjective(trial(3, 'paused', null, {}, { latest: { step: 1, metrics: { acc: 1 } } }), 'loss'),
                   { value: null, step: null });
  assert.deepEqual(shownObjective(trial(4, 'paused', null), 'loss'), { value: null, step: null });
});

test('train time: device time when the server reports it, else finished minus started', () => {
  assert.equal(trainMs(trial(1, 'completed', 1, {}, { device_seconds: 22.5 })), 22500);
  assert.equal(trainMs(trial(1, 'completed', 1, {}, { device_seconds: 0 })), 500);  // none measured
  assert.equal(trainMs(trial(1, 'completed', 1)), 500);  // an older server
  assert.equal(trainMs(trial(1, 'running', null, {}, { finished_ms: null })), null);
  const trials = [trial(0, 'completed', 1, {}, { device_seconds: 2 }), trial(1, 'completed', 1)];
  assert.deepEqual(tableRows(trials, { metric: 'loss', sort: 'duration' }).map((t) => t.number), [1, 0]);
});

test('parallel-coordinate axes: the spec\'s bounds for parameters, log where the spec says', () => {
  assert.deepEqual(paramAxis({ type: 'int', low: 64, high: 256, log: true }, [100, 200]),
                   { type: 'log', min: 64, max: 256, logBase: 2 });
  assert.deepEqual(paramAxis({ type: 'float', low: 1e-5, high: 1, log: true }, [0.01]),
                   { type: 'log', min: 1e-5, max: 1, logBase: 10 });
  assert.deepEqual(paramAxis({ type: 'float', low: -5, high: 5 }, [1.5, 2]), { type: 'value', min: -5, max: 5 });
  // Every choice, in the spec's order, drawn or not; the short form too.
  assert.deepEqual(paramAxis({ type: 'categorical', choices: ['sgd', 'adam', true] }, ['adam']),
                   { type: 'category', data: ['sgd', 'adam', 'true'] });
  assert.deepEqual(paramAxis(['b', 'a'], []), { type: 'category', data: ['b', 'a'] });
  // Where the spec does not say: the values' own range and choices.
  assert.deepEqual(paramAxis(undefined, [3, 1, 2]), { type: 'value', min: 1, max: 3 });
  assert.deepEqual(paramAxis(undefined, ['q', 'p']), { type: 'category', data: ['p', 'q'] });
  assert.deepEqual(paramAxis({ type: 'float', low: 0, high: 1 }, [1.5]), { type: 'value', min: 0, max: 1.5 });
  assert.deepEqual(specParams({ params: { x: { type: 'float', low: 0, high: 1 },
                                          optimizer: { type: 'categorical', choices: ['sgd', 'adam'],
                                                       conditional: { sgd: { momentum: { type: 'float', low: 0, high: 0.99 } } } } } }).momentum,
                   { type: 'float', low: 0, high: 0.99 });
});

test('data and time ranges: the data\'s own, a sensible span for one point', () => {
  assert.deepEqual(dataRange([0.61, 0.93, 0.7]), { min: 0.61, max: 0.93 });
  assert.deepEqual(dataRange([2]), { min: 1.9, max: 2.1 });
  assert.deepEqual(dataRange([0]), { min: -1, max: 1 });
  assert.equal(dataRange([]), null);
  const t = 1700000000000;
  assert.deepEqual(timeRange([t]), { min: t - 30000, max: t + 30000 });  // a minute, not two days
  assert.deepEqual(timeRange([t, t + 3600000, null]), { min: t - 180000, max: t + 3780000 });
  assert.equal(timeRange([]), null);
});

test('a trial\'s measurements as curves, the objective first, device time summed', () => {
  const s = trialSeries([{ step: 1, metrics: { loss: 0.5, acc: 0.8, note: 'x' }, device_ms: 200 },
                         { step: 0, metrics: { loss: 0.9 }, device_ms: 300 },
                         { step: 2, metrics: { acc: 0.9, loss: 0.4 }, device_ms: 0 }], 'loss');
  assert.deepEqual(s.metrics, ['loss', 'acc']);
  assert.deepEqual(s.byMetric.loss, [[0, 0.9], [1, 0.5], [2, 0.4]]);
  assert.deepEqual(s.byMetric.acc, [[1, 0.8], [2, 0.9]]);
  assert.equal(s.deviceMs, 500);
  assert.deepEqual(trialSeries([], 'loss'), { metrics: [], byMetric: {}, deviceMs: 0 });
});

test('fleet utilization counts one trial per device', () => {
  const u = fleetUtilization([
    { id: 1, host: 'a', devices: [{}, {}], current_trials: [{}] },
    { id: 2, host: 'b', devices: [{}], current_trials: [] },
  ]);
  assert.equal(u.devices, 3);
  assert.equal(u.busy, 1);
  assert.equal(u.perWorker[0].utilization, 0.5);
});

test('the trial set keeps trials by number as reads add and replace them', () => {
  const set = new TrialSet();
  const t = (id, number, state = 'running') => ({ id, number, state });
  assert.deepEqual(set.merge([t(1, 0), t(2, 1), t(4, 3)]).map((c) => c.before), [undefined, undefined, undefined]);
  const changes = set.merge([t(2, 1, 'completed'), t(3, 2), t(5, 4)]);
  assert.deepEqual(changes.map((c) => [c.before?.state, c.after.state]),
                   [['running', 'completed'], [undefined, 'running'], [undefined, 'running']]);
  assert.deepEqual(set.list.map((x) => x.number), [0, 1, 2, 3, 4]);
  assert.equal(set.byId.get(2).state, 'completed');
  assert.equal(set.list[1], set.byId.get(2));
});

test('the curve set merges points by step and swaps a replaced curve whole', () => {
  const set = new CurveSet();
  set.merge([{ trial_id: 1, steps: [0, 1], values: [5, 4] }]);
  assert.deepEqual(set.merge([{ trial_id: 1, steps: [2], values: [3] }]), [1]);
  assert.deepEqual(set.byId.get(1), { trial_id: 1, steps: [0, 1, 2], values: [5, 4, 3] });
  set.merge([{ trial_id: 1, steps: [1, 3], values: [4.5, 2] }]);  // a repeated step takes the new value
  assert.deepEqual(set.byId.get(1), { trial_id: 1, steps: [0, 1, 2, 3], values: [5, 4.5, 3, 2] });
  set.merge([{ trial_id: 1, steps: [0], values: [9], replace: true }]);
  assert.deepEqual(set.byId.get(1), { trial_id: 1, steps: [0], values: [9] });
});

test('trial changes say what a live update must redraw', () => {
  const running = trial(7, 'running', null, {}, { id: 7 });
  const changed = (before, after) => trialChanges([{ before, after }], 'loss');
  // A report on a running trial: only the table and the summary.
  assert.deepEqual(changed(running, { ...running, updated_ms: 1 }),
                   { outcomes: new Set(), states: false, spaces: false, any: true });
  // It completes: everything drawn from completed trials, in its space.
  const done = changed(running, { ...running, state: 'completed', final_metrics: { loss: 1 } });
  assert.deepEqual([...done.outcomes], ['a']);
  assert.equal(done.states, true);
  assert.equal(done.spaces, false);
  // A new trial: the spaces' share, the curves' kinds.
  const created = changed(undefined, trial(8, 'pending', null));
  assert.deepEqual([created.outcomes.size, created.states, created.spaces], [0, true, true]);
  // Pruned: its curve changes kind; no completed trial changed.
  assert.deepEqual(changed(running, { ...running, state: 'pruned' }).outcomes, new Set());
  assert.equal(trialChanges([], 'loss').any, false);
});

// Several objectives: the front the page draws.
const mo = (number, loss, acc, size, state = 'completed') => ({
  number, state, params: {}, space: 'a', finished_ms: 1000 * number,
  final_metrics: { loss, acc, ...(size === null ? {} : { size }) },
});

test('objectives come from objectives, else the one objective', () => {
  assert.deepEqual(objectivesOf({ objective: { metric: 'loss' } }), [{ metric: 'loss', direction: 'minimize' }]);
  assert.deepEqual(objectivesOf({ objectives: [{ metric: 'a', direction: 'maximize' }, { metric: 'b' }] }),
                   [{ metric: 'a', direction: 'maximize' }, { metric: 'b', direction: 'minimize' }]);
});

test('a trial outside a constraint, or without its metric, is infeasible and says why', () => {
  const c = [{ metric: 'size', max: 5 }, { metric: 'acc', min: 0.5 }];
  assert.deepEqual(infeasibleReasons(mo(0, 1, 0.9, 3), c), []);
  assert.deepEqual(infeasibleReasons(mo(0, 1, 0.4, 9), c),
                   ['size: 9 is above the max 5', 'acc: 0.4 is below the min 0.5']);
  assert.deepEqual(infeasibleReasons(mo(0, 1, 0.9, null), c), ['size: not reported']);
});

test('the 2-D hypervolume is the area the points dominate inside the reference', () => {
  assert.equal(hypervolume2d([[1, 3], [2, 2], [3, 1]], [4, 4]), 3 + 2 + 1);
  assert.equal(hypervolume2d([[1, 1], [2, 2]], [3, 3]), 4, 'a dominated point adds nothing');
  assert.equal(hypervolume2d([[5, 1]], [4, 4]), 0, 'outside the reference');
});

test('with constraints the best trial is the best feasible one', () => {
  const trials = [mo(1, 1.0, 0.8, 1), mo(2, 0.1, 0.9, 9), mo(3, 0.5, 0.9, null)];
  assert.equal(bestTrial(trials, 'loss', 'minimize').number, 2);
  assert.equal(bestTrial(trials, 'loss', 'minimize', [{ metric: 'size', max: 5 }]).number, 1);
});

test('the front: feasible trials no other beats in every objective, with the hypervolume over time', () => {
  const objectives = [{ metric: 'loss' }, { metric: 'acc', direction: 'maximize' }];
  const constraints = [{ metric: 'size', max: 5 }];
  const trials = [
    mo(1, 1.0, 0.8, 1),   // front
    mo(2, 2.0, 0.9, 1),   // front: worse loss, better accuracy
    mo(3, 2.5, 0.7, 1),   // dominated by 1 and 2
    mo(4, 0.1, 0.99, 9),  // best in both, but too big
    mo(5, 0.5, 0.5, null),  // never said its size
    mo(6, 0.1, 0.1, 1, 'pruned'),  // not completed: not drawn
    mo(7, 0.9, 0.75, 1),  // front: the best feasible loss
  ];
  const v = paretoView(trials, objectives, constraints);
  assert.deepEqual(v.front.map((e) => e.trial.number).sort(), [1, 2, 7]);
  assert.deepEqual(v.dominated.map((e) => e.trial.number), [3]);
  assert.deepEqual(v.infeasible.map((e) => e.trial.number).sort(), [4, 5]);
  assert.deepEqual(v.infeasible.find((e) => e.trial.number === 5).reasons, ['size: not reported']);
  assert.equal(v.front.find((e) => e.trial.number === 2).y, 0.9, 'drawn as reported, not minimized');
  assert.deepEqual(v.reference, [2.5, 0.7], 'the worst feasible loss and accuracy');
  // Over time, never falling: 1 alone, then 2, then 3 adds nothing, then 7.
  const hv = v.hypervolume.map(([, h]) => h);
  assert.equal(hv.length, 4);
  assert.ok(Math.abs(hv[0] - 1.5 * 0.1) < 1e-12, String(hv[0]));
  assert.ok(hv[1] > hv[0] && hv[2] === hv[1] && hv[3] > hv[2], String(hv));
  // One objective: nothing to draw.
  assert.deepEqual(paretoView(trials, [objectives[0]]).front, []);
});

test('each device class gets a colour of its own, the same whatever order the trials come in', () => {
  const trials = [{ device_class: 'gpu:T4' }, { device_class: null }, { device_class: 'cpu:x2' },
                  { device_class: 'gpu:T4' }, {}, { device_class: 'cpu:x1' }];
  const colors = deviceClassColors(trials, ['red', 'green']);
  assert.deepEqual([...colors], [['cpu:x1', 'red'], ['cpu:x2', 'green'], ['gpu:T4', 'red']],
                   'by name, cycling through the palette; no colour for a trial without a class');
  assert.deepEqual([...deviceClassColors([...trials].reverse(), ['red', 'green'])], [...colors]);
  assert.equal(deviceClassColors([{ device_class: null }], ['red']).size, 0);
});

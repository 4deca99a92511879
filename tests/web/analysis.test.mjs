// The dashboard's computations (web/js/analysis.js) under node:test.
import assert from 'node:assert/strict';
import test from 'node:test';

import {
  bestSoFar, bestTrial, CurveSet, fleetUtilization, importance, spaceHistory, tableRows, trialChanges, TrialSet,
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

test('importance keeps equal values in one bin and leaves out parameters it cannot judge', () => {
  const trials = [0, 0, 0, 0, 1, 1].map((x, i) => trial(i, 'completed', x, { x, only: i === 0 ? 1 : undefined }));
  for (const t of trials) if (t.params.only === undefined) delete t.params.only;
  const rows = importance(trials, 'loss');
  assert.deepEqual(rows.map((r) => r.param), ['x']);
  assert.equal(rows[0].importance, 1);
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

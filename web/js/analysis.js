// What the experiment page computes from trials: pure functions, no DOM, so
// tests/web/analysis.test.mjs runs them under node.

export const FINISHED = ['completed', 'pruned', 'failed', 'cancelled'];

// The trial's objective value, or null when it has none (yet).
export function objective(trial, metric) {
  const v = trial.final_metrics?.[metric];
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

export function better(direction) {
  return direction === 'maximize' ? (a, b) => a > b : (a, b) => a < b;
}

// The completed trial with the best objective value, or null; with
// constraints, the best feasible one.
export function bestTrial(trials, metric, direction, constraints = []) {
  const isBetter = better(direction);
  let best = null;
  for (const t of trials) {
    const v = t.state === 'completed' && !infeasibleReasons(t, constraints).length ? objective(t, metric) : null;
    if (v !== null && (best === null || isBetter(v, objective(best, metric)))) best = t;
  }
  return best;
}

// Best-so-far of completed trials, in the order they finished (byTime:
// [finished_ms, best]) and in trial-number order (byTrial: [number, best]).
export function bestSoFar(trials, metric, direction) {
  const isBetter = better(direction);
  const done = trials.filter((t) => t.state === 'completed' && objective(t, metric) !== null);
  const run = (sorted, x) => {
    const out = [];
    let best = null;
    for (const t of sorted) {
      const v = objective(t, metric);
      if (best === null || isBetter(v, best)) best = v;
      out.push([x(t), best]);
    }
    return out;
  };
  return {
    byTrial: run([...done].sort((a, b) => a.number - b.number), (t) => t.number),
    byTime: run([...done].sort((a, b) => (a.finished_ms ?? 0) - (b.finished_ms ?? 0)), (t) => t.finished_ms),
  };
}

// Parameter importance: how much of the objective's variance each
// parameter alone predicts out of sample. For each parameter, take the
// completed trials that have it (a conditional parameter counts only where
// it is active), predict each trial's objective y_i from the others alone
// (leave one out): a number by the mean y of its k nearest trials by the
// parameter's value, k = max(2, floor(sqrt(n) / 2)); a category by the mean y
// of the other trials with that choice (of all others when it has none).
// Then
//   importance = max(0, 1 - sum_i (y_i - pred_i)^2 / sum_i (y_i - mean)^2),
// the share of the variance it predicts (cross-validated R^2, in [0, 1]).
// Unlike the in-sample share of binned means (eta squared, used before),
// a parameter the objective does not depend on predicts nothing out of
// sample, so it scores near 0 rather than the (bins - 1) / (n - 1) that
// chance gives it: on the quadratic example (examples/quadratic-client.yaml,
// loss from x alone) at 10 random trials, eta squared ranked another
// parameter at or above x one run in six. Parameters with fewer than 4
// trials or a single value are left out. It sees each parameter alone (no
// interactions, unlike a full fANOVA over a fitted forest).
export function importance(trials, metric) {
  // Per parameter, its values and the objective values beside them (arrays,
  // not an object per point: this runs over every completed trial).
  const byParam = new Map();
  for (const t of trials) {
    const y = t.state === 'completed' ? objective(t, metric) : null;
    if (y === null || !t.params) continue;
    for (const [name, value] of Object.entries(t.params)) {
      let p = byParam.get(name);
      if (!p) byParam.set(name, (p = { values: [], ys: [] }));
      p.values.push(value);
      p.ys.push(y);
    }
  }
  const out = [];
  for (const [param, { values, ys }] of byParam) {
    const r2 = predictedShare(values, ys);
    if (r2 !== null) out.push({ param, importance: r2, trials: values.length });
  }
  return out.sort((a, b) => b.importance - a.importance || a.param.localeCompare(b.param));
}

// Below this many completed trials the importance chart says it does not
// know rather than ranking: at 6 random trials of the quadratic example the
// ranking put a parameter the loss does not depend on first a third of the
// time, whatever the estimator; at 10 (TPE's usual startup), importance()
// ranks x first in all but a few runs in a hundred (tests/web/analysis.test.mjs).
export const MIN_IMPORTANCE_TRIALS = 10;

// What the importance chart shows: { rows, completed, why }: rows as
// importance() answers them once there are MIN_IMPORTANCE_TRIALS completed
// trials with an objective value, else none, and `why` says what is missing.
export function importanceView(trials, metric) {
  let completed = 0;
  for (const t of trials) if (t.state === 'completed' && objective(t, metric) !== null) completed++;
  if (completed < MIN_IMPORTANCE_TRIALS) {
    return { rows: [], completed,
             why: `importance needs at least ${MIN_IMPORTANCE_TRIALS} completed trials; ${completed} so far` };
  }
  const rows = importance(trials, metric);
  if (rows.length === 0) return { rows, completed, why: 'no parameter has 4 completed trials with two values or more' };
  // All at 0: a ranking would only be the names' order.
  if (rows.every((r) => r.importance === 0)) {
    return { rows: [], completed,
             why: `no parameter alone predicts the objective yet (${completed} completed trials)` };
  }
  return { rows, completed, why: null };
}

// The leave-one-out R^2 of y predicted from one parameter's values, or null
// when it cannot be judged (fewer than 4 trials, a single value).
function predictedShare(values, ys) {
  const n = values.length;
  if (n < 4 || values.every((v) => v === values[0])) return null;
  const mean = ys.reduce((s, y) => s + y, 0) / n;
  const total = ys.reduce((s, y) => s + (y - mean) ** 2, 0);
  if (!(total > 0)) return 0;
  let sse = 0;
  if (values.some((v) => typeof v !== 'number')) {
    const groups = new Map();  // choice -> [sum of y, count]
    values.forEach((v, i) => {
      const g = groups.get(String(v)) ?? [0, 0];
      g[0] += ys[i];
      g[1]++;
      groups.set(String(v), g);
    });
    values.forEach((v, i) => {
      const [sum, count] = groups.get(String(v));
      const predicted = count > 1 ? (sum - ys[i]) / (count - 1) : (n * mean - ys[i]) / (n - 1);
      sse += (ys[i] - predicted) ** 2;
    });
  } else {
    const order = values.map((_, i) => i).sort((a, b) => values[a] - values[b]);
    const k = Math.max(2, Math.floor(Math.sqrt(n) / 2));
    // Each trial's k nearest others, walking out from its place in the
    // order and taking the nearer side first.
    order.forEach((i, at) => {
      let lo = at - 1;
      let hi = at + 1;
      let sum = 0;
      for (let taken = 0; taken < k; taken++) {
        const below = lo >= 0 ? values[i] - values[order[lo]] : Infinity;
        const above = hi < n ? values[order[hi]] - values[i] : Infinity;
        sum += ys[below <= above ? order[lo--] : order[hi++]];
      }
      sse += (ys[i] - sum / k) ** 2;
    });
  }
  return Math.max(0, 1 - sse / total);
}

// Each space's priority (its share of the budget when each trial was
// created, as the server's ranking set it) and its actual share of the
// trials created so far, both by trial number. At most maxPoints points per
// series (every k-th trial, and the last).
export function spaceHistory(trials, spaces, maxPoints = 1000) {
  const sorted = [...trials].sort((a, b) => a.number - b.number);
  const stride = Math.max(1, Math.ceil(sorted.length / maxPoints));
  const counts = Object.fromEntries(spaces.map((s) => [s, 0]));
  const out = Object.fromEntries(spaces.map((s) => [s, { priority: [], share: [] }]));
  sorted.forEach((t, i) => {
    if (t.space in counts) counts[t.space]++;
    const sampled = i % stride === 0 || i === sorted.length - 1;
    if (!sampled) return;
    for (const s of spaces) out[s].share.push([t.number, counts[s] / (i + 1)]);
    if (t.space in out) out[t.space].priority.push([t.number, t.priority]);
  });
  return out;
}

// What the trials table shows as a trial's objective: its final value, or
// for a trial without one (running, paused, cut) the value of its last
// report, with that report's step: { value, step } (step null for a final
// value; value null when neither is there). The last report is the later of
// `latest` ({step, metrics}, the REST API's; absent from older servers) and
// the last point of `curve` ({steps, values} of the objective, as CurveSet
// holds it), which live reads keep newer: a report does not bring its trial
// back in a read of the trials changed since.
export function shownObjective(t, metric, curve = null) {
  const final = objective(t, metric);
  if (final !== null) return { value: final, step: null };
  let out = { value: null, step: null };
  const v = t.latest?.metrics?.[metric];
  if (typeof v === 'number' && Number.isFinite(v)) out = { value: v, step: t.latest.step ?? null };
  const last = curve?.steps.length ? curve.steps.length - 1 : -1;
  if (last >= 0 && Number.isFinite(curve.values[last]) && !(curve.steps[last] < out.step)) {
    out = { value: curve.values[last], step: curve.steps[last] };
  }
  return out;
}

// A trial's training time in ms: its device time (`device_seconds`, the sum
// over its steps, time paused at a rung left out) when the server reports
// it above 0, else finished - started (which counts time paused), else null.
export function trainMs(t) {
  return typeof t.device_seconds === 'number' && t.device_seconds > 0 ? 1000 * t.device_seconds : duration(t);
}

// The trials table's rows: filtered by state and space, sorted by a column
// (the objective by the value shown: final, or the last report's; `curves`,
// a CurveSet's byId, where the page holds them).
export const SORT_KEYS = {
  number: (t) => t.number,
  state: (t) => t.state,
  space: (t) => t.space ?? '',
  objective: (t, metric, curves) => shownObjective(t, metric, curves?.get(t.id)).value,
  duration: (t) => trainMs(t),
  started: (t) => t.started_ms,
};

export function duration(t) {
  return t.started_ms && t.finished_ms ? t.finished_ms - t.started_ms : null;
}

export function tableRows(trials, { state = '', space = '', sort = 'number', descending = false, metric, curves }) {
  const key = SORT_KEYS[sort] ?? SORT_KEYS.number;
  const rows = trials.filter((t) => (!state || t.state === state) && (!space || t.space === space));
  const sign = descending ? -1 : 1;
  return rows.sort((a, b) => {
    const x = key(a, metric, curves);
    const y = key(b, metric, curves);
    // Missing values last, whatever the direction.
    if (x === null || x === undefined) return y === null || y === undefined ? a.number - b.number : 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : x > y ? 1 : a.number - b.number) * sign;
  });
}

// A trial's measurements (GET /api/v1/trials/{id}: [{step, metrics,
// device_ms}, ...]) as curves: { metrics, byMetric, deviceMs }, the numeric
// metrics it reported (the objective first, the rest by name), each as
// [step, value] points by step, and its device time summed over its steps.
export function trialSeries(measurements, metric) {
  const byMetric = {};
  let deviceMs = 0;
  for (const m of [...measurements].sort((a, b) => a.step - b.step)) {
    deviceMs += m.device_ms > 0 ? m.device_ms : 0;
    for (const [name, v] of Object.entries(m.metrics ?? {})) {
      if (typeof v === 'number' && Number.isFinite(v)) (byMetric[name] ??= []).push([m.step, v]);
    }
  }
  const metrics = Object.keys(byMetric).sort((a, b) => (b === metric) - (a === metric) || a.localeCompare(b));
  return { metrics, byMetric, deviceMs };
}

// A search space's parameters from the spec, conditional ones included
// (`optimizer: {..., conditional: {sgd: {momentum: {...}}}}`), by name:
// name -> the definition as written (`{type, low, high, log, choices}`, or a
// list of choices, the spec's short form).
export function specParams(spaceSpec) {
  const out = {};
  const walk = (params) => {
    for (const [name, def] of Object.entries(params ?? {})) {
      out[name] ??= def;
      if (def && !Array.isArray(def) && def.conditional) for (const sub of Object.values(def.conditional)) walk(sub);
    }
  };
  walk(spaceSpec?.params);
  return out;
}

// A parallel-coordinates axis for a parameter: the space's bounds from the
// spec (a log axis where the parameter is log; base 2 when its range is under
// a factor 100, so that 64-256 reads 64, 128, 256 rather than one tick at
// 100), every choice of a categorical one in the spec's order; the values'
// own range or choices where the spec does not say (no definition, or
// values outside it). `values`: the values the trials drawn have.
export function paramAxis(def, values) {
  const choices = Array.isArray(def) ? def : def?.type === 'categorical' ? def.choices ?? [] : null;
  const numbers = values.every((v) => typeof v === 'number');
  if (choices || !numbers) {
    const data = (choices ?? []).map(String);
    for (const v of values) if (!data.includes(String(v))) data.push(String(v));
    if (!choices) data.sort();
    return { type: 'category', data };
  }
  let min = typeof def?.low === 'number' ? def.low : Infinity;
  let max = typeof def?.high === 'number' ? def.high : -Infinity;
  for (const v of values) {
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (!(min <= max)) return { type: 'value', scale: true };  // no bounds, no values
  if (def?.log && min > 0) return { type: 'log', min, max, logBase: max / min < 100 ? 2 : 10 };
  return { type: 'value', ...dataRange([min, max]) };
}

// [min, max] of numbers for a value axis: their own range; one value (or
// all equal) gets a margin of 5% of it (1 for 0) either side. Null when
// there are none.
export function dataRange(values) {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (!(min <= max)) return null;
  if (min === max) {
    const margin = Math.abs(min) * 0.05 || 1;
    return { min: min - margin, max: max + margin };
  }
  return { min, max };
}

// A time axis's range for times in ms: their span and 5% of it either side,
// at least a minute in all, so that one point (or a burst within a second)
// is not drawn across the two days ECharts' nice ticks would give it.
// Null when there are none.
export function timeRange(times) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const t of times) {
    if (!Number.isFinite(t)) continue;
    if (t < lo) lo = t;
    if (t > hi) hi = t;
  }
  if (!(lo <= hi)) return null;
  const pad = Math.max((hi - lo) * 0.05, (60000 - (hi - lo)) / 2);
  return { min: lo - pad, max: hi + pad };
}

// The fleet in numbers: devices, busy devices (one trial per device), and
// utilization = busy / devices, per worker and overall.
export function fleetUtilization(workers) {
  let devices = 0;
  let busy = 0;
  const perWorker = workers.map((w) => {
    const d = w.devices.length;
    const b = Math.min(d, w.current_trials.length);
    devices += d;
    busy += b;
    return { id: w.id, host: w.host, devices: d, busy: b, utilization: d ? b / d : 0 };
  });
  return { devices, busy, utilization: devices ? busy / devices : 0, perWorker };
}

// An experiment's trials as the page holds them: by id, and in number order
// (what every chart and the table read), merged from the server's reads.
// merge() answers what it changed, [{ before, after }] (before undefined for
// a trial not held yet), so that a live update redraws only what it touches;
// it keeps the order by number without sorting everything again (a new
// trial usually goes last).
export class TrialSet {
  constructor() {
    this.byId = new Map();
    this.list = [];
  }

  merge(trials) {
    const changes = [];
    for (const after of trials) {
      const before = this.byId.get(after.id);
      this.byId.set(after.id, after);
      if (before) {
        this.list[this.indexOf(before.number)] = after;
      } else if (this.list.length === 0 || this.list.at(-1).number < after.number) {
        this.list.push(after);
      } else {
        this.list.splice(this.indexOf(after.number), 0, after);
      }
      changes.push({ before, after });
    }
    return changes;
  }

  // Where a trial of this number is held, or would go.
  indexOf(number) {
    let lo = 0;
    let hi = this.list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.list[mid].number < number) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

// Learning curves by trial id, merged from the server's reads
// (/measurements: thinned at first, then the points written since): points
// by step, a repeated step taking the new value; a curve marked `replace`
// (its trial lost points: a new attempt) swapped whole. merge() answers the
// ids of the curves it changed.
export class CurveSet {
  constructor() {
    this.byId = new Map();
  }

  merge(curves) {
    const changed = [];
    for (const c of curves) {
      const held = this.byId.get(c.trial_id);
      this.byId.set(c.trial_id, c.replace || !held ? { trial_id: c.trial_id, steps: c.steps, values: c.values }
                                                   : mergeCurve(held, c));
      changed.push(c.trial_id);
    }
    return changed;
  }
}

// A curve with another's points added, by step (a repeated step takes the
// new value). New points usually come after the held ones: then they are
// appended, without a map of every step.
export function mergeCurve(held, add) {
  const last = held.steps.length ? held.steps.at(-1) : -Infinity;
  if (add.steps.every((s, i) => s > (i === 0 ? last : add.steps[i - 1]))) {
    return { trial_id: held.trial_id, steps: [...held.steps, ...add.steps], values: [...held.values, ...add.values] };
  }
  const byStep = new Map(held.steps.map((s, i) => [s, held.values[i]]));
  add.steps.forEach((s, i) => byStep.set(s, add.values[i]));
  const steps = [...byStep.keys()].sort((a, b) => a - b);
  return { trial_id: held.trial_id, steps, values: steps.map((s) => byStep.get(s)) };
}

// What a merge of trials (TrialSet.merge's answer) changes on the page, so
// that a live update redraws only that:
//   outcomes     spaces whose completed trials (their objective values, what
//                best-so-far, parallel coordinates and importance draw)
//                changed: a trial completed, or a completed one changed
//   states       a trial changed state (which colour its learning curve has)
//   spaces       a trial was created, or changed space or priority (the
//                spaces' priority and share)
//   any          anything came at all (the table, the summary)
// A report on a running trial, the common update, changes none of the first
// three.
export function trialChanges(changes, metric) {
  const outcome = (t) => (t?.state === 'completed' ? objective(t, metric) : null);
  const out = { outcomes: new Set(), states: false, spaces: false, any: changes.length > 0 };
  for (const { before, after } of changes) {
    const [was, now] = [outcome(before), outcome(after)];
    if (was !== now || (now !== null && (before.finished_ms !== after.finished_ms || before.space !== after.space))) {
      if (was !== null) out.outcomes.add(before.space);
      if (now !== null) out.outcomes.add(after.space);
    }
    if (before?.state !== after.state) out.states = true;
    if (!before || before.space !== after.space || before.priority !== after.priority) out.spaces = true;
  }
  return out;
}

// --- Several objectives: the front ---------------------------------------

// The spec's objectives, [{metric, direction}]: `objectives`, else the one
// `objective`.
export function objectivesOf(spec) {
  const list = Array.isArray(spec?.objectives) && spec.objectives.length ? spec.objectives
    : spec?.objective ? [spec.objective] : [];
  return list.map((o) => ({ metric: o.metric, direction: o.direction ?? 'minimize' }));
}

// Why a completed trial's final metrics break the spec's constraints (as
// the server says it: "size: 9 is above the max 5", "size: not reported");
// empty when it keeps them all.
export function infeasibleReasons(trial, constraints = []) {
  const reasons = [];
  for (const c of constraints) {
    const v = objective(trial, c.metric);
    if (v === null) reasons.push(`${c.metric}: not reported`);
    else if (typeof c.max === 'number' && v > c.max) reasons.push(`${c.metric}: ${v} is above the max ${c.max}`);
    else if (typeof c.min === 'number' && v < c.min) reasons.push(`${c.metric}: ${v} is below the min ${c.min}`);
  }
  return reasons;
}

// a dominates b (both minimized): no worse in any objective, better in one.
function dominates(a, b) {
  let strictly = false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] > b[i]) return false;
    if (a[i] < b[i]) strictly = true;
  }
  return strictly;
}

// The hypervolume of 2-D minimized points against `ref`: the area they
// dominate inside it.
export function hypervolume2d(points, ref) {
  const inside = points.filter(([x, y]) => x < ref[0] && y < ref[1]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let area = 0;
  let lowestY = ref[1];
  for (const [x, y] of inside) {
    if (y >= lowestY) continue;
    // Sorted by x, each new lower point adds the strip from its x to the reference.
    area += (ref[0] - x) * (lowestY - y);
    lowestY = y;
  }
  return area;
}

// A colour for each device class that trained one of `trials` (the class
// with the most device time, trial.device_class), in name order so that a
// set of classes always gets the same colours; trials without a class (an
// ask/tell client's) get none. A Map from class to colour, cycling through
// `palette` past its length.
export function deviceClassColors(trials, palette) {
  const classes = [...new Set(trials.map((t) => t.device_class).filter((c) => typeof c === 'string' && c))].sort();
  return new Map(classes.map((c, k) => [c, palette[k % palette.length]]));
}

// The experiment's completed trials against its objectives, drawn as the
// pair `pair` (indices into `objectives`): `front` (feasible, no feasible
// trial dominates it in every objective), `dominated` (feasible, behind the
// front), `infeasible` (with `reasons`), each entry {trial, x, y, reasons};
// and the hypervolume of the pair's feasible points over time
// ([finished_ms, hv]) against `reference`, the worst feasible value of each
// of the two (null with fewer than two objectives or no feasible trial).
export function paretoView(trials, objectives, constraints = [], pair = [0, 1]) {
  const view = { front: [], dominated: [], infeasible: [], hypervolume: [], reference: null };
  if (objectives.length < 2) return view;
  const sign = objectives.map((o) => (o.direction === 'maximize' ? -1 : 1));
  const done = [];
  for (const t of trials) {
    if (t.state !== 'completed') continue;
    const values = objectives.map((o) => objective(t, o.metric));
    if (values.some((v) => v === null)) continue;
    const reasons = infeasibleReasons(t, constraints);
    const entry = { trial: t, x: values[pair[0]], y: values[pair[1]], reasons,
                    minimized: values.map((v, i) => v * sign[i]) };
    if (reasons.length) view.infeasible.push(entry);
    else done.push(entry);
  }
  // In lexicographic order a point can only be dominated by an earlier one,
  // and then by one of the front found so far: O(N F), not O(N^2).
  const lexicographic = (a, b) => {
    for (let i = 0; i < a.minimized.length; i++) {
      if (a.minimized[i] !== b.minimized[i]) return a.minimized[i] - b.minimized[i];
    }
    return 0;
  };
  for (const e of [...done].sort(lexicographic)) {
    (view.front.some((f) => dominates(f.minimized, e.minimized)) ? view.dominated : view.front).push(e);
  }
  if (!done.length) return view;
  // The pair, minimized, against its worst feasible values.
  const ref = [0, 1].map((k) => Math.max(...done.map((e) => e.minimized[pair[k]])));
  view.reference = ref.map((v, k) => v * sign[pair[k]]);
  // Over time: the pair's own front so far, kept, so that each trial costs
  // O(front) rather than a new sweep over every point.
  const inOrder = [...done].sort((a, b) => (a.trial.finished_ms ?? 0) - (b.trial.finished_ms ?? 0));
  let kept = [];
  let hv = 0;
  for (const e of inOrder) {
    const p = [e.minimized[pair[0]], e.minimized[pair[1]]];
    const covered = kept.some((q) => q[0] <= p[0] && q[1] <= p[1]);
    if (!covered) {
      kept = kept.filter((q) => !(p[0] <= q[0] && p[1] <= q[1]));
      kept.push(p);
      hv = hypervolume2d(kept, ref);
    }
    view.hypervolume.push([e.trial.finished_ms, hv]);
  }
  return view;
}

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

// The completed trial with the best objective value, or null.
export function bestTrial(trials, metric, direction) {
  const isBetter = better(direction);
  let best = null;
  for (const t of trials) {
    const v = t.state === 'completed' ? objective(t, metric) : null;
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

// Parameter importance, fANOVA-style first-order effects estimated by the
// correlation ratio: for each parameter, the completed trials that have it
// are grouped into bins of its value (categories as they are; numbers into
// up to B equal-count bins by rank, B = clamp(floor(sqrt(n)), 2, 10), equal
// values always in one bin), and
//   importance = sum_b n_b (mean_b - mean)^2 / sum_i (y_i - mean)^2,
// the share of the objective's variance that the bins' means explain
// (eta squared, in [0, 1]). Parameters with fewer than 4 trials or a single
// bin are left out. It sees each parameter alone (no interactions) and
// overstates parameters with few trials per bin.
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
    const eta2 = correlationRatio(binned(values, ys));
    if (eta2 !== null) out.push({ param, importance: eta2, trials: values.length });
  }
  return out.sort((a, b) => b.importance - a.importance || a.param.localeCompare(b.param));
}

// Groups of objective values, one per bin of the parameter's value.
function binned(values, ys) {
  if (values.some((v) => typeof v !== 'number')) {
    const groups = new Map();
    values.forEach((v, i) => {
      const key = String(v);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(ys[i]);
    });
    return [...groups.values()];
  }
  const order = values.map((_, i) => i).sort((a, b) => values[a] - values[b]);  // stable: ties keep their order
  const n = order.length;
  const bins = Math.min(10, Math.max(2, Math.floor(Math.sqrt(n))));
  const groups = [];
  let rankOfValue = 0;
  for (let i = 0; i < n; i++) {
    if (i === 0 || values[order[i]] !== values[order[i - 1]]) rankOfValue = i;
    const b = Math.floor((rankOfValue * bins) / n);
    (groups[b] ??= []).push(ys[order[i]]);
  }
  return groups.filter(Boolean);
}

function correlationRatio(groups) {
  const all = groups.flat();
  if (all.length < 4 || groups.length < 2) return null;
  const mean = all.reduce((s, y) => s + y, 0) / all.length;
  const total = all.reduce((s, y) => s + (y - mean) ** 2, 0);
  if (!(total > 0)) return 0;
  const between = groups.reduce((s, g) => {
    const m = g.reduce((a, y) => a + y, 0) / g.length;
    return s + g.length * (m - mean) ** 2;
  }, 0);
  return Math.min(1, between / total);
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

// The trials table's rows: filtered by state and space, sorted by a column.
export const SORT_KEYS = {
  number: (t) => t.number,
  state: (t) => t.state,
  space: (t) => t.space ?? '',
  objective: (t, metric) => objective(t, metric),
  duration: (t) => duration(t),
  started: (t) => t.started_ms,
};

export function duration(t) {
  return t.started_ms && t.finished_ms ? t.finished_ms - t.started_ms : null;
}

export function tableRows(trials, { state = '', space = '', sort = 'number', descending = false, metric }) {
  const key = SORT_KEYS[sort] ?? SORT_KEYS.number;
  const rows = trials.filter((t) => (!state || t.state === state) && (!space || t.space === space));
  const sign = descending ? -1 : 1;
  return rows.sort((a, b) => {
    const x = key(a, metric);
    const y = key(b, metric);
    // Missing values last, whatever the direction.
    if (x === null || x === undefined) return y === null || y === undefined ? a.number - b.number : 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : x > y ? 1 : a.number - b.number) * sign;
  });
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

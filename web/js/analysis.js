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
  const byParam = new Map();
  for (const t of trials) {
    const y = t.state === 'completed' ? objective(t, metric) : null;
    if (y === null) continue;
    for (const [name, value] of Object.entries(t.params ?? {})) {
      if (!byParam.has(name)) byParam.set(name, []);
      byParam.get(name).push({ value, y });
    }
  }
  const out = [];
  for (const [param, points] of byParam) {
    const eta2 = correlationRatio(binned(points));
    if (eta2 !== null) out.push({ param, importance: eta2, trials: points.length });
  }
  return out.sort((a, b) => b.importance - a.importance || a.param.localeCompare(b.param));
}

// Groups of objective values, one per bin of the parameter's value.
function binned(points) {
  if (points.some((p) => typeof p.value !== 'number')) {
    const groups = new Map();
    for (const p of points) {
      const key = String(p.value);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(p.y);
    }
    return [...groups.values()];
  }
  const sorted = [...points].sort((a, b) => a.value - b.value);
  const n = sorted.length;
  const bins = Math.min(10, Math.max(2, Math.floor(Math.sqrt(n))));
  const groups = [];
  let rankOfValue = 0;
  for (let i = 0; i < n; i++) {
    if (i === 0 || sorted[i].value !== sorted[i - 1].value) rankOfValue = i;
    const b = Math.floor((rankOfValue * bins) / n);
    (groups[b] ??= []).push(sorted[i].y);
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

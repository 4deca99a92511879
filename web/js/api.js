// The REST API as the dashboard uses it: JSON requests with the bearer
// token, and the live event stream.
//
// The token: a link with ?token=T stores T in localStorage (and drops it from
// the address bar); the token form does the same. Every fetch sends it as
// "Authorization: Bearer T". EventSource cannot send headers, so the event
// stream gets it as ?access_token=T, which hpo-server accepts on that route
// only.

const TOKEN_KEY = 'heterotune.token';

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function takeTokenFromUrl() {
  const url = new URL(location.href);
  const t = url.searchParams.get('token');
  if (t === null) return;
  setToken(t);
  url.searchParams.delete('token');
  history.replaceState(null, '', url);
}

export function setToken(t) {
  if (t) localStorage.setItem(TOKEN_KEY, t);
  else localStorage.removeItem(TOKEN_KEY);
}

function token() {
  return localStorage.getItem(TOKEN_KEY) || '';
}

// A request that changes state (any method but GET and HEAD) says
// Content-Type: application/json, with a body or without: the server refuses
// such requests in the types a cross-site form or fetch may send without
// asking (text/plain and the other CORS-simple ones).
export async function requestJson(method, path, body) {
  const headers = {};
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (method !== 'GET' && method !== 'HEAD') headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await r.json().catch(() => null);
  if (!r.ok) throw new ApiError(r.status, answer?.error?.message ?? `${r.status} ${r.statusText}`);
  return answer;
}

export function getJson(path) {
  return requestJson('GET', path);
}

// GET that answers null for a 404 (e.g. "no completed trial yet").
export async function getJsonOrNull(path) {
  try {
    return await getJson(path);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

const MAX_PAGE = 10000;  // the server's largest page (ApiOptions::max_page in server/http/api.h)

// Every trial of an experiment (or with `since`, a cursor from an earlier
// read, those changed after it), in keyset pages of the server's largest
// size. Answers { trials, cursor }: the cursor of the first page, taken
// before any of them was read, so that a later read since it misses nothing.
// A cursor the server cannot apply (another server's) throws an ApiError
// with status 409: read everything again.
export async function allTrials(experimentId, since = null) {
  return trialPages(experimentId, since, -1, MAX_PAGE);
}

// Every trial of an experiment of about `expected` trials (a promise of
// its count a moment ago), read in up to four keyset pages at once, which
// the server builds on threads of their own. Pages cut at multiples of the
// page size miss nothing, trial numbers being distinct integers: the page
// after k·size − 1 holds every number from k·size to (k+1)·size − 1 there
// is (a trial may come twice; merging by id keeps one); after the last
// cut, the pages go on one by one. The cursor comes from a read of no
// trials made before any page. Answers { trials, cursor } as allTrials.
export async function allTrialsAtOnce(experimentId, expected) {
  const [{ cursor }, n] = await Promise.all([getJson(`/api/v1/experiments/${experimentId}/trials?limit=0`), expected]);
  const size = Math.min(MAX_PAGE, Math.max(1000, Math.ceil(n / 4)));
  const cuts = Math.max(1, Math.ceil(n / size));
  const pages = await Promise.all(Array.from({ length: cuts }, (_, k) => (k < cuts - 1
    ? trialPage(experimentId, null, k * size - 1, size) : trialPages(experimentId, null, k * size - 1, size))));
  return { trials: pages.flatMap((p) => p.trials), cursor };
}

// One page: { trials, next_after, cursor } as the server answers.
function trialPage(experimentId, since, after, limit) {
  const query = new URLSearchParams({ limit });
  if (after >= 0) query.set('after', after);
  if (since !== null) query.set('since', since);
  return getJson(`/api/v1/experiments/${experimentId}/trials?${query}`);
}

// The pages from `after` on, one by one; the cursor is the first page's.
async function trialPages(experimentId, since, after, limit) {
  const out = [];
  let cursor = null;
  for (;;) {
    const r = await trialPage(experimentId, since, after, limit);
    cursor ??= r.cursor;
    out.push(...r.trials);
    if (r.next_after === null || r.next_after === undefined) return { trials: out, cursor };
    after = r.next_after;
  }
}

export const EVENT_TYPES = ['experiment.created', 'experiment.finished', 'trial.created', 'trial.reported',
                            'trial.requeued', 'trial.finished', 'trial.paused', 'trial.resumed',
                            'trial.restarted', 'trial.cotuning_stopped', 'worker.registered', 'worker.gone',
                            'lagged'];

// Opens /api/v1/events; calls onEvent(type, data) per event and
// onStatus('on' | 'connecting' | 'off'). EventSource reconnects by itself.
export function subscribe(onEvent, onStatus) {
  const url = token() ? `/api/v1/events?access_token=${encodeURIComponent(token())}` : '/api/v1/events';
  const source = new EventSource(url);
  source.onopen = () => onStatus('on');
  source.onerror = () => onStatus(source.readyState === EventSource.CLOSED ? 'off' : 'connecting');
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (e) => onEvent(type, JSON.parse(e.data)));
  }
  return source;
}

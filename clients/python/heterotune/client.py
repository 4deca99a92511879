"""The REST client: experiments, and the ask/tell loop of client experiments.

    import heterotune
    client = heterotune.Client()                  # HPO_REST_SERVER, HPO_TOKEN, HPO_TLS_CA
    exp = client.create_experiment("examples/quadratic-client.yaml")
    for trial in exp.trials():                    # asks for one trial at a time
        for step in range(5):
            loss = (trial.params["x"] - 1.5) ** 2 + 1 / (step + 1)
            if trial.report(step, loss=loss).should_prune:
                break                             # the server has ended the trial
        trial.complete()                          # a no-op for a trial the server ended
    print(exp.best())

Everything here is one REST call (or a short sequence of them) under /api/v1,
described by the server's /openapi.json and docs/api.md. A Client holds no
connection between calls, so one Client, and its Experiment and Trial
objects, may be used from several threads at once (Experiment.optimize does).
"""

import ipaddress
import json
import os
import ssl
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import warnings

from . import errors

__all__ = ["Client", "Experiment", "Trial", "Decision", "DEFAULT_SERVER"]

# The same default, variable names and address form as hpctl.
DEFAULT_SERVER = "127.0.0.1:8080"


def _server_from_environment():
    """$HPO_REST_SERVER; else $HPO_SERVER, its old name, with a FutureWarning.

    HPO_SERVER was the REST address for hpctl and this client but the gRPC
    address for hpo-worker, so one setting could not serve both.
    """
    server = os.environ.get("HPO_REST_SERVER")
    if server:
        return server
    server = os.environ.get("HPO_SERVER")
    if server:
        warnings.warn("HPO_SERVER is deprecated (hpctl and this client read it as the REST address, "
                      "hpo-worker as the gRPC one): set HPO_REST_SERVER instead", FutureWarning, stacklevel=3)
    return server


def _is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Leaves every redirect to Client.request, which raises RedirectRefusedError.

    urllib's own handler follows a redirect with the request's headers,
    Authorization included: to any host, and from https to plain http.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError(code) for this answer


class Client:
    """A connection to one hpo-server's REST API.

    Args:
      server: "HOST:PORT", "http://HOST:PORT" or "https://HOST:PORT"; default
        $HPO_REST_SERVER (or, with a warning, $HPO_SERVER, its old name), else
        127.0.0.1:8080.
      token: the bearer token; default $HPO_TOKEN (none when unset or empty).
      tls_ca: a PEM file of the CA(s) that signed the server's certificate,
        for https; default $HPO_TLS_CA, else the system's CAs. As in hpctl,
        there is no switch to skip verification.
      timeout: seconds to wait for one answer.
      retries: how many times a refusal the server marks as worth retrying
        (it sends Retry-After: 409 lost races, 429, 503, 504) is retried,
        after the delay it asks for. Every call is safe to repeat: reports
        are idempotent per (trial, step) and a retried finish changes nothing.

    Requests, and the token, go to `server` only: a redirect (HTTP 3xx) is
    not followed but raises RedirectRefusedError, whatever host, port or
    scheme it names (hpo-server never redirects; hpctl does the same).
    """

    def __init__(self, server=None, token=None, *, tls_ca=None, timeout=60.0, retries=3):
        server = server or _server_from_environment() or DEFAULT_SERVER
        if "://" not in server:
            server = "http://" + server
        parsed = urllib.parse.urlsplit(server)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"server: expected HOST:PORT or http(s)://HOST:PORT, got {server!r}")
        self.url = f"{parsed.scheme}://{parsed.netloc}"
        self.token = token if token is not None else os.environ.get("HPO_TOKEN", "")
        self.timeout = timeout
        self.retries = retries
        handlers = [_RefuseRedirects()]
        if tls_ca and parsed.scheme != "https":
            raise ValueError(f"tls_ca: needs an https:// server, not {self.url}")
        if parsed.scheme == "https":
            cafile = tls_ca or os.environ.get("HPO_TLS_CA") or None
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
        # A proxy from the environment must not see requests (and the token)
        # meant for a server on this machine.
        if _is_loopback(parsed.hostname):
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self):
        return f"heterotune.Client({self.url!r})"

    # Experiments ------------------------------------------------------------

    def create_experiment(self, spec):
        """Creates an experiment and returns it (an Experiment).

        `spec` is a dict (sent as JSON), or the path (str or os.PathLike) of a
        YAML or JSON spec file, sent as it is: the server parses YAML itself,
        so its errors name the line, and no YAML library is needed here.
        docs/spec.md documents every field. A bad spec raises
        InvalidArgumentError whose `field` is the path of the bad field.
        """
        if isinstance(spec, dict):
            reply = self.request("POST", "/api/v1/experiments", spec)
        elif isinstance(spec, (str, os.PathLike)):
            path = os.fspath(spec)
            with open(path, "rb") as f:
                text = f.read()
            kind = "application/json" if path.endswith(".json") else "application/yaml"
            reply = self.request("POST", "/api/v1/experiments", text, content_type=kind)
        else:
            raise TypeError(f"spec: expected a dict or a file path, got {type(spec).__name__}")
        return Experiment(self, reply["id"], reply)

    def experiment(self, experiment_id):
        """The experiment with this id (NotFoundError when there is none)."""
        exp = Experiment(self, int(experiment_id))
        exp.refresh()
        return exp

    def list_experiments(self, offset=0, limit=100):
        """Experiments, oldest first, each with its trial counts in .info["trials"]."""
        reply = self.request("GET", "/api/v1/experiments", query={"offset": offset, "limit": limit})
        return [Experiment(self, e["id"], e) for e in reply["experiments"]]

    def cancel_experiment(self, experiment_id, reason=None):
        body = {} if reason is None else {"reason": reason}
        return self.request("POST", f"/api/v1/experiments/{int(experiment_id)}:cancel", body)

    def get_trial(self, trial_id):
        """One trial as the server shows it, with its measurements (a dict)."""
        return self.request("GET", f"/api/v1/trials/{int(trial_id)}")

    def workers(self):
        """The registered workers, their devices and measured speeds (a list of dicts)."""
        return self.request("GET", "/api/v1/workers")["workers"]

    # The one place HTTP happens ---------------------------------------------

    def request(self, method, path, body=None, *, query=None, content_type="application/json"):
        """One REST call; returns the decoded JSON answer.

        `body` is a dict (sent as JSON) or bytes (sent as `content_type`).
        Every POST carries a body and says its type, even an empty one: the
        server refuses a POST without application/json or application/yaml
        (its defence against cross-site pages, docs/deploy.md "Threat model").
        Raises an APIError subclass for a refusal, RedirectRefusedError
        for a redirect, ServerUnreachableError when no answer came.
        """
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None
        headers = {"Accept": "application/json"}
        if method != "GET":
            if body is None:
                body = {}
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        attempt = 0
        while True:
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(req, timeout=self.timeout) as r:
                    raw = r.read()
                return json.loads(raw) if raw else {}
            except urllib.error.HTTPError as e:
                if 300 <= e.code < 400:
                    raise self._redirect(e, method, path) from None
                err = self._refusal(e, method, path)
            except (urllib.error.URLError, OSError) as e:
                raise errors.ServerUnreachableError(self.url, getattr(e, "reason", e)) from None
            if not (err.retryable and err.retry_after is not None and attempt < self.retries):
                raise err
            attempt += 1
            time.sleep(min(err.retry_after, 10.0))

    def _redirect(self, e, method, path):
        location = e.headers.get("Location")
        e.close()
        if location:
            location = urllib.parse.urljoin(e.url, location)
        return errors.RedirectRefusedError(self.url, e.code, location, method, path)

    @staticmethod
    def _refusal(e, method, path):
        raw = e.read()
        retry_after = None
        try:
            retry_after = float(e.headers.get("Retry-After", ""))
        except (TypeError, ValueError):
            pass
        code, message = "", raw.decode("utf-8", "replace").strip() or e.reason
        try:
            error = json.loads(raw)["error"]
            code, message = error["code"], error["message"]
        except (ValueError, KeyError, TypeError):
            pass  # not the server's JSON: a proxy's page, say; keep its text
        return errors.error_for(e.code, code, message, method, path, retry_after)


class Experiment:
    """One experiment on the server. Attributes: id, name, info (the last answer about it)."""

    def __init__(self, client, experiment_id, info=None):
        self.client = client
        self.id = int(experiment_id)
        self.info = dict(info or {})
        self._metric = None

    def __repr__(self):
        return f"heterotune.Experiment(id={self.id}, name={self.name!r}, state={self.state!r})"

    @property
    def name(self):
        return self.info.get("name")

    @property
    def state(self):
        """The state at the last answer ("running", "completed", "cancelled", ...); see refresh()."""
        return self.info.get("state")

    def refresh(self):
        """Reads the experiment again (state, spec, trial counts) into .info and returns it."""
        self.info = self.client.request("GET", f"/api/v1/experiments/{self.id}")
        self._metric = None
        return self.info

    @property
    def metric(self):
        """The objective's metric name (the first objective's, with several), from the spec."""
        return self.objectives[0]

    @property
    def objectives(self):
        """The objectives' metric names, in spec order (one for `objective:`)."""
        if self._metric is None:
            info = self.info if "spec" in self.info else self.refresh()
            spec = info["spec"]
            listed = spec.get("objectives") or [spec["objective"]]
            self._metric = [o["metric"] for o in listed]
        return self._metric

    def cancel(self, reason=None):
        reply = self.client.cancel_experiment(self.id, reason)
        self.info["state"] = reply.get("state", "cancelled")
        return reply

    def best(self):
        """The best trial (a dict: params, final_metrics, ...), or None if no trial reported anything.

        When no trial completed, it is the trial with the best reported value
        at any step, with ``partial`` true, ``best_step`` and ``best_metrics``
        saying where, and ``checkpoint_step`` the step of its kept checkpoint
        (None without one)."""
        try:
            return self.client.request("GET", f"/api/v1/experiments/{self.id}/best")
        except errors.NotFoundError:
            self.refresh()  # raises NotFoundError itself when the experiment is what is missing
            return None

    def pareto_front(self, all_trials=False):
        """The feasible completed trials that no other dominates in every objective
        (dicts, each with ``values`` in objective order and ``rank`` 0); with
        `all_trials`, every completed trial, with its ``rank`` (None when
        infeasible), ``feasible`` and ``infeasible_reasons``."""
        query = {"all": "true"} if all_trials else None
        return self.client.request("GET", f"/api/v1/experiments/{self.id}/pareto", query=query)["trials"]

    def list_trials(self, state=None, space=None, offset=0, limit=100):
        """Trials as the server shows them (dicts), by number; `state` and `space` filter."""
        query = {"state": state, "space": space, "offset": offset, "limit": limit}
        return self.client.request("GET", f"/api/v1/experiments/{self.id}/trials", query=query)["trials"]

    # Ask/tell ---------------------------------------------------------------

    def suggest(self, count=1):
        """Asks for up to `count` new trials, leased to this client. An empty
        list: the budget (max_trials) has been handed out. FailedPreconditionError
        when the experiment has ended or is not a client experiment."""
        reply = self.client.request("POST", f"/api/v1/experiments/{self.id}/trials:suggest", {"count": count})
        return [Trial(self, t) for t in reply["trials"]]

    def _next_trial(self):
        """One new trial, or None once there will be no more: the budget is
        handed out or the experiment ended (cancelled, say)."""
        try:
            trials = self.suggest(1)
        except errors.FailedPreconditionError:
            # Either this experiment has ended (nothing more to do) or it is
            # not one a client may ask about (an error to show): the state says which.
            if self.refresh().get("state") != "running":
                return None
            raise
        return trials[0] if trials else None

    def trials(self):
        """Yields new trials one at a time until the experiment's budget is
        handed out or it ends. Report to each and complete (or fail) it
        before the next, or it stays leased to this client until its lease
        expires."""
        while True:
            trial = self._next_trial()
            if trial is None:
                return
            yield trial

    def optimize(self, objective, n_trials=None, n_jobs=1, catch=()):
        """Runs `objective(trial)` on new trials, Optuna-style, in `n_jobs` threads.

        The objective reads trial.params, may call trial.report(step, ...) and
        raise TrialPruned when the answer says should_prune, and returns
        the objective's value (a number: completed with {metric: value}; with
        several objectives a tuple of numbers in objective order, as
        Optuna's multi-objective studies take), a dict of final metrics, or
        None (the server takes the last report's).

        n_trials: how many trials this call runs, in all threads; None: until
          the budget is handed out or the experiment ends.
        n_jobs: threads, each running one trial at a time; -1: one per CPU.
        catch: exception types that fail the trial and go on. Any other
          exception fails its trial, lets the other threads finish the trials
          they have, and is raised here.
        Returns the trials it ran, in the order they started.
        """
        if n_jobs == -1:
            n_jobs = os.cpu_count() or 1
        if n_jobs < 1:
            raise ValueError(f"n_jobs: must be at least 1 or -1, got {n_jobs}")
        if n_trials is not None and n_trials < 0:
            raise ValueError(f"n_trials: must be at least 0, got {n_trials}")
        lock = threading.Lock()
        ran, raised = [], []
        stop = threading.Event()

        def take():
            with lock:
                if stop.is_set() or (n_trials is not None and len(ran) >= n_trials):
                    return None
                trial = self._next_trial()
                if trial is None:
                    stop.set()
                else:
                    ran.append(trial)
                return trial

        def work():
            try:
                while (trial := take()) is not None:
                    self._run_one(trial, objective, catch)
            except BaseException as e:  # noqa: B902 - handed to the calling thread
                with lock:
                    raised.append(e)
                stop.set()

        if n_jobs == 1:
            # In the caller's thread: Ctrl-C and debuggers work as usual.
            while (trial := take()) is not None:
                self._run_one(trial, objective, catch)
            return ran
        threads = [threading.Thread(target=work, name=f"heterotune-optimize-{i}", daemon=True)
                   for i in range(n_jobs)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)  # a timed join lets Ctrl-C through
        except KeyboardInterrupt:
            stop.set()
            raise
        if raised:
            raise raised[0]
        return ran

    def _run_one(self, trial, objective, catch):
        try:
            value = objective(trial)
        except errors.TrialPruned:
            if not trial.finished:
                trial.fail("the objective raised TrialPruned without a prune decision from the server")
            return
        except catch as e:
            trial.fail(_reason(e))
            print(f"heterotune: trial {trial.id} failed: {_reason(e)}", file=sys.stderr)
            return
        except BaseException as e:
            trial.fail(_reason(e))
            raise
        if value is None or isinstance(value, dict):
            trial.complete(value)
        elif isinstance(value, (tuple, list)):
            names = self.objectives
            if len(value) != len(names):
                trial.fail(f"the objective returned {len(value)} values for {len(names)} objectives {names}")
                raise ValueError(f"objective returned {len(value)} values; the experiment has "
                                 f"{len(names)} objectives: {names}")
            trial.complete({name: float(v) for name, v in zip(names, value)})
        else:
            trial.complete({self.metric: float(value)})


def _reason(e):
    return "".join(traceback.format_exception_only(type(e), e)).strip()


class Decision:
    """The server's answer to a report.

    decision: "continue", "prune" (the server has pruned the trial) or "stop"
      (the experiment has ended; the trial is cancelled).
    should_prune: True unless it is "continue": the trial must not go on.
    system: a new system setting to use from the next step on (a dict), or None.
    reason: why, when the server says.
    """

    __slots__ = ("decision", "system", "reason")

    def __init__(self, decision, system=None, reason=""):
        self.decision = decision
        self.system = system
        self.reason = reason

    @property
    def should_prune(self):
        return self.decision != "continue"

    def __repr__(self):
        return f"heterotune.Decision({self.decision!r}, system={self.system!r}, reason={self.reason!r})"


# The states in which the server will take nothing more about a trial.
_FINISHED = {"completed", "pruned", "failed", "cancelled"}


class Trial:
    """A trial leased to this client. Attributes: id, number, params, system
    (the system setting to run with; a report may change it), space, state,
    info (the server's answer about it)."""

    def __init__(self, experiment, info):
        self.experiment = experiment
        self.info = info
        self.id = info["id"]
        self.number = info.get("number")
        self.params = info.get("params", {})
        self.system = info.get("system", {})
        self.space = info.get("space")
        self.state = info.get("state")
        self.last_decision = None

    def __repr__(self):
        return f"heterotune.Trial(id={self.id}, number={self.number}, params={self.params!r}, state={self.state!r})"

    @property
    def finished(self):
        return self.state in _FINISHED

    def report(self, step, metrics=None, *, samples_per_sec=None, system=None, **more_metrics):
        """Tells the server one step's metrics; returns its Decision.

        Metrics come as keywords (loss=0.3) or, for names that are not Python
        identifiers ("val/loss"), as the `metrics` dict; they must hold the
        objective. samples_per_sec is the measured speed and `system` the
        setting it was measured with (default: trial.system). After a
        should_prune answer the trial is over on the server: stop training it.
        Repeating a step's report is harmless (reports are idempotent per step).
        """
        all_metrics = dict(metrics or {})
        all_metrics.update(more_metrics)
        body = {"step": int(step), "metrics": all_metrics}
        if samples_per_sec is not None:
            body["samples_per_sec"] = float(samples_per_sec)
        body["system"] = self.system if system is None else system
        reply = self.experiment.client.request("POST", f"/api/v1/trials/{self.id}/measurements", body)
        d = Decision(reply["decision"], reply.get("system"), reply.get("reason", ""))
        self.last_decision = d
        if d.system is not None:
            self.system = d.system
        self.state = {"continue": "running", "prune": "pruned", "stop": "cancelled"}.get(d.decision, self.state)
        return d

    def complete(self, metrics=None, **more_metrics):
        """Ends the trial as completed with its final metrics (default: the
        last report's objective). After the server itself ended the trial (a
        should_prune answer) this does nothing, so a loop may call it either way."""
        if self.state in ("pruned", "cancelled"):
            return
        all_metrics = dict(metrics or {})
        all_metrics.update(more_metrics)
        self.experiment.client.request("POST", f"/api/v1/trials/{self.id}:complete", {"metrics": all_metrics})
        self.state = "completed"

    def fail(self, reason, metrics=None):
        """Ends the trial as failed, saying why (shown by hpctl and the dashboard).
        Does nothing after the server itself ended the trial."""
        if self.state in ("pruned", "cancelled"):
            return
        body = {"reason": str(reason)}
        if metrics:
            body["metrics"] = dict(metrics)
        self.experiment.client.request("POST", f"/api/v1/trials/{self.id}:fail", body)
        self.state = "failed"

    def refresh(self):
        """Reads the trial again (state, measurements) into .info and returns it."""
        self.info = self.experiment.client.get_trial(self.id)
        self.state = self.info.get("state")
        return self.info

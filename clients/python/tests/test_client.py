"""The REST client against a real hpo-server (conftest.py starts it)."""

import json
import socket
import threading
import warnings

import pytest

import heterotune
from conftest import REPO


def spec(name, max_trials=4, steps=3, early_stopping=None, **extra):
    """A client (ask/tell) experiment over one float, minimizing loss."""
    s = {"name": name,
         "objective": {"metric": "loss", "direction": "minimize"},
         "spaces": [{"name": "main", "params": {"x": {"type": "float", "low": -5, "high": 5}}}],
         "algorithm": {"sampler": "random", "seed": 7},
         "budget": {"max_trials": max_trials, "max_parallel": 4, "steps_per_trial": steps},
         "executor": {"client": {}}}
    if early_stopping:
        s["early_stopping"] = early_stopping
    s.update(extra)
    return s


def counts(exp):
    return exp.refresh()["trials"]


# Experiments: create, list, get, cancel -------------------------------------

def test_create_from_dict_then_list_get_and_cancel(client):
    exp = client.create_experiment(spec("from-dict"))
    assert exp.id > 0 and exp.name == "from-dict" and exp.state == "running"

    assert exp.id in [e.id for e in client.list_experiments(limit=1000)]
    got = client.experiment(exp.id)
    assert got.name == "from-dict" and got.state == "running"
    assert got.metric == "loss"
    assert got.info["spec"]["budget"]["max_trials"] == 4

    exp.cancel("enough")
    again = client.experiment(exp.id)
    assert again.state == "cancelled" and again.info["reason"] == "enough"
    # An ended experiment hands out no trials: the loop just ends.
    assert list(again.trials()) == []


def test_create_from_yaml_and_json_files(client, tmp_path):
    exp = client.create_experiment(REPO / "examples" / "quadratic-client.yaml")
    assert exp.name == "quadratic"
    assert exp.refresh()["spec"]["spaces"][0]["name"] == "main"

    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec("from-json-file")))
    assert client.create_experiment(str(path)).name == "from-json-file"


def test_connection_defaults_come_from_the_environment(server, monkeypatch):
    monkeypatch.delenv("HPO_SERVER", raising=False)
    monkeypatch.setenv("HPO_REST_SERVER", server.url.removeprefix("http://"))
    monkeypatch.setenv("HPO_TOKEN", server.token)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns of nothing
        c = heterotune.Client()
    assert c.url == server.url
    assert isinstance(c.list_experiments(), list)


def test_the_old_variable_hpo_server_still_works_with_a_warning(monkeypatch):
    # HPO_SERVER meant REST here and gRPC for hpo-worker: HPO_REST_SERVER
    # replaces it, and wins when both are set.
    monkeypatch.delenv("HPO_REST_SERVER", raising=False)
    monkeypatch.setenv("HPO_SERVER", "127.0.0.1:9")
    with pytest.warns(FutureWarning, match="HPO_SERVER is deprecated.*set HPO_REST_SERVER"):
        assert heterotune.Client().url == "http://127.0.0.1:9"
    monkeypatch.setenv("HPO_REST_SERVER", "127.0.0.1:10")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert heterotune.Client().url == "http://127.0.0.1:10"


# Bad input: a 4xx raises a typed error naming the field ---------------------

def test_bad_spec_raises_invalid_argument_naming_the_field(client):
    bad = spec("bad-bounds")
    bad["spaces"][0]["params"]["x"] = {"type": "float", "low": 5, "high": -5}
    with pytest.raises(heterotune.InvalidArgumentError) as e:
        client.create_experiment(bad)
    assert e.value.status == 400 and e.value.code == "InvalidArgument"
    assert e.value.field == "spaces[0].params.x.low"
    assert e.value.message == "spaces[0].params.x.low: must be < high"
    assert "spaces[0].params.x.low: must be < high" in str(e.value)
    assert isinstance(e.value, heterotune.APIError) and not e.value.retryable


def test_bad_yaml_spec_names_the_field(client, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text((REPO / "examples" / "quadratic-client.yaml").read_text()
                    .replace("direction: minimize", "direction: smallest"))
    with pytest.raises(heterotune.InvalidArgumentError) as e:
        client.create_experiment(path)
    assert e.value.field == "objective.direction"
    assert "smallest" in e.value.message


def test_unknown_spec_field_is_named(client):
    with pytest.raises(heterotune.InvalidArgumentError) as e:
        client.create_experiment(spec("typo", budgett={"max_trials": 3}))
    assert e.value.field == "budgett"


def test_report_without_the_objective_names_the_metric(client):
    exp = client.create_experiment(spec("no-objective"))
    trial = exp.suggest(1)[0]
    with pytest.raises(heterotune.InvalidArgumentError) as e:
        trial.report(0, accuracy=0.5)
    assert e.value.field == "metrics.loss"
    exp.cancel()


def test_query_parameter_errors_name_the_parameter(client):
    exp = client.create_experiment(spec("bad-query"))
    with pytest.raises(heterotune.InvalidArgumentError) as e:
        exp.list_trials(state="sleeping")
    assert e.value.field == "state"
    exp.cancel()


def test_wrong_token_is_unauthenticated(server):
    with pytest.raises(heterotune.UnauthenticatedError) as e:
        heterotune.Client(server.url, "not-the-token").list_experiments()
    assert e.value.status == 401 and e.value.field is None


def test_missing_experiment_is_not_found(client):
    with pytest.raises(heterotune.NotFoundError) as e:
        client.experiment(987654321)
    assert e.value.status == 404 and e.value.field is None


def test_unreachable_server():
    # A port nothing listens on: one the OS handed out, then closed.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(heterotune.ServerUnreachableError):
        heterotune.Client(f"127.0.0.1:{port}", timeout=5).list_experiments()


# Ask/tell --------------------------------------------------------------------

def test_ask_tell_loop_prunes_and_completes_the_budget(client):
    # Median stopping after 2 completed trials; every other trial after
    # those reports a loss far above the others', so it is pruned at step 0.
    exp = client.create_experiment(spec("ask-tell", max_trials=8, steps=3,
                                        early_stopping={"rule": "median", "startup_trials": 2}))
    decisions = {}
    n = 0
    for trial in exp.trials():
        bad = n >= 2 and n % 2 == 0
        n += 1
        assert set(trial.params) == {"x"}
        for step in range(3):
            # Good trials share one curve, so none is worse than the median
            # (the rule prunes only a strictly worse one).
            loss = 100.0 if bad else 1.0 / (step + 1)
            d = trial.report(step, loss=loss, samples_per_sec=1000)
            if d.should_prune:
                break
        decisions[trial.id] = (bad, d.decision)
        trial.complete()  # a no-op after a prune
    assert n == 8
    assert {tid: d for tid, (bad, d) in decisions.items() if bad} == \
        {tid: "prune" for tid, (bad, _) in decisions.items() if bad}
    assert all(d == "continue" for bad, d in decisions.values() if not bad)

    c = counts(exp)
    assert (c["completed"], c["pruned"], c["total"]) == (5, 3, 8)
    assert exp.state == "completed"
    best = exp.best()
    assert best["state"] == "completed" and best["final_metrics"]["loss"] == pytest.approx(1.0 / 3)
    trial = client.get_trial(best["id"])
    assert [m["step"] for m in trial["measurements"]] == [0, 1, 2]


def test_best_is_none_before_any_trial_completes(client):
    exp = client.create_experiment(spec("no-best-yet"))
    assert exp.best() is None
    exp.cancel()


def test_trials_of_a_worker_experiment_raise_instead_of_ending(client):
    s = spec("on-workers")
    s["executor"] = {"command": {"argv": ["true"]}}
    exp = client.create_experiment(s)
    with pytest.raises(heterotune.FailedPreconditionError) as e:
        next(exp.trials())
    assert "only client experiments" in e.value.message
    exp.cancel()


def test_a_report_after_cancel_says_stop(client):
    exp = client.create_experiment(spec("cancelled-mid-trial"))
    trial = exp.suggest(1)[0]
    assert not trial.report(0, loss=1.0).should_prune
    exp.cancel()
    d = trial.report(1, loss=0.5)
    assert d.decision == "stop" and d.should_prune
    trial.complete()  # nothing to do: the server cancelled it
    assert client.get_trial(trial.id)["state"] == "cancelled"


# optimize --------------------------------------------------------------------

def test_optimize_in_threads_runs_n_trials_then_the_rest(client):
    exp = client.create_experiment(spec("optimize", max_trials=10))
    threads = set()

    def objective(trial):
        threads.add(threading.get_ident())
        loss = None
        for step in range(3):
            loss = (trial.params["x"] - 1.5) ** 2 + 1.0 / (step + 1)
            if trial.report(step, loss=loss).should_prune:
                raise heterotune.TrialPruned()
        return loss

    ran = exp.optimize(objective, n_trials=6, n_jobs=3)
    assert len(ran) == 6 and all(t.state == "completed" for t in ran)
    c = counts(exp)
    assert (c["completed"], c["total"]) == (6, 6)
    for t in ran:  # the returned value is the final objective
        info = client.get_trial(t.id)
        assert info["final_metrics"]["loss"] == pytest.approx((t.params["x"] - 1.5) ** 2 + 1.0 / 3)

    rest = exp.optimize(objective, n_jobs=2)  # until the budget is spent
    assert len(rest) == 4
    assert counts(exp)["completed"] == 10 and exp.state == "completed"
    assert threading.get_ident() not in threads  # n_jobs > 1: every trial ran in a thread of optimize's


def test_several_objectives_return_a_tuple_and_give_a_front(client):
    s = spec("front", max_trials=8)
    del s["objective"]
    s["objectives"] = [{"metric": "loss"}, {"metric": "width", "direction": "maximize"}]
    s["constraints"] = [{"metric": "width", "max": 4}]
    exp = client.create_experiment(s)
    assert exp.objectives == ["loss", "width"] and exp.metric == "loss"

    def objective(trial):
        x = trial.params["x"]
        return x * x, abs(x)  # smaller loss and larger width pull apart: a front

    ran = exp.optimize(objective)
    assert len(ran) == 8 and all(t.state == "completed" for t in ran)
    every = exp.pareto_front(all_trials=True)
    assert len(every) == 8
    by_id = {t["id"]: t for t in every}
    for t in ran:
        x = t.params["x"]
        rec = by_id[t.id]
        assert rec["values"] == [pytest.approx(x * x), pytest.approx(abs(x))]
        assert rec["feasible"] == (abs(x) <= 4)
        if not rec["feasible"]:
            assert rec["rank"] is None and rec["infeasible_reasons"][0].startswith("width: ")
    front = exp.pareto_front()
    assert front and all(t["rank"] == 0 and t["feasible"] for t in front)
    # No feasible trial beats one on the front in both objectives.
    feasible = [t for t in every if t["feasible"]]
    for f in front:
        (loss, width) = f["values"]
        assert not any(o["values"][0] <= loss and o["values"][1] >= width and o["values"] != f["values"]
                       for o in feasible)

    wrong = client.create_experiment({**s, "name": "front-wrong"})
    with pytest.raises(ValueError, match="2 objectives"):
        wrong.optimize(lambda trial: (1.0,), n_trials=1)


def test_optimize_fails_the_trial_and_raises_the_objectives_error(client):
    exp = client.create_experiment(spec("optimize-raises", max_trials=5))

    def objective(trial):
        raise ValueError(f"bad x {trial.params['x']:.3f}")

    with pytest.raises(ValueError, match="bad x"):
        exp.optimize(objective, n_trials=3)
    failed = exp.list_trials(state="failed")
    assert len(failed) == 1 and "ValueError: bad x" in failed[0]["reason"]

    # With catch=, each failure is recorded and the run goes on.
    ran = exp.optimize(objective, n_trials=2, catch=(ValueError,))
    assert [t.state for t in ran] == ["failed", "failed"]
    assert counts(exp)["failed"] == 3
    exp.cancel()


def test_optimize_with_dict_results_and_pruning(client):
    exp = client.create_experiment(spec("optimize-prunes", max_trials=6, steps=2,
                                        early_stopping={"rule": "median", "startup_trials": 2}))
    calls = []

    def objective(trial):
        bad = len(calls) >= 2
        calls.append(trial.id)
        for step in range(2):
            if trial.report(step, loss=50.0 if bad else 1.0 - step * 0.1).should_prune:
                raise heterotune.TrialPruned()
        return {"loss": 0.8, "extra": 1.0}

    exp.optimize(objective)
    c = counts(exp)
    assert (c["completed"], c["pruned"]) == (2, 4)
    assert exp.best()["final_metrics"] == {"loss": 0.8, "extra": 1.0}


def test_optimize_rejects_bad_arguments(client):
    exp = client.create_experiment(spec("optimize-args"))
    with pytest.raises(ValueError, match="n_jobs"):
        exp.optimize(lambda t: 0.0, n_jobs=0)
    with pytest.raises(ValueError, match="n_trials"):
        exp.optimize(lambda t: 0.0, n_trials=-1)
    exp.cancel()

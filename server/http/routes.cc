// The REST API's route table: every route the server answers, with who may
// call it, its handler (server/http/api.cc) and its OpenAPI operation. It is
// both the router and the "paths" of /openapi.json (server/http/openapi.cc),
// so a route cannot be served without being documented, or documented
// without being served; tests/rest_api_test.cc checks both against the
// document a client reads.
#include "server/http/api.h"

namespace hpo::server {

const std::vector<RestApi::Route>& RestApi::Routes() {
  static const std::vector<Route> kRoutes = {
      {"GET", "/healthz", Access::kProbe, 200, RawHandler{&RestApi::Healthz},
       R"json({"summary": "Liveness (no auth)", "security": [], "responses": {"200": {"description": "ok"}}})json"},
      {"GET", "/readyz", Access::kOpen, 200, RawHandler{&RestApi::Readyz},
       R"json({"summary": "Readiness: the store answers (no auth)", "security": [], "responses": {"200": {"description": "ready"}, )json"
       R"json("503": {"description": "store unavailable"}}})json"},
      {"GET", "/metrics", Access::kMetrics, 200, RawHandler{&RestApi::Metrics},
       R"json({"summary": "Prometheus text format", "responses": {"200": {"description": "metrics"}}})json"},
      {"GET", "/openapi.json", Access::kToken, 200, RawHandler{&RestApi::OpenApiDocument},
       R"json({"summary": "This document", "responses": {"200": {"description": "OpenAPI 3"}}})json"},
      {"GET", "/api/v1/experiments", Access::kToken, 200, JsonHandler{&RestApi::ListExperiments},
       R"json({"summary": "List experiments, newest first", "parameters": [{"name": "offset", "in": "query", )json"
       R"json("schema": {"type": "integer"}}, {"name": "limit", "in": "query", "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"description": "{experiments: [...]}"}}})json"},
      {"POST", "/api/v1/experiments", Access::kToken, 201, JsonHandler{&RestApi::CreateExperiment},
       R"json({"summary": "Create an experiment from a spec (YAML or JSON body)", )json"
       R"json("requestBody": {"content": {"application/yaml": {}, "application/json": {}}}, )json"
       R"json("responses": {"201": {"description": "created"}, )json"
       R"json("400": {"description": "invalid spec; the message names the field path", )json"
       R"json("content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}})json"},
      {"POST", "/api/v1/experiments:validate", Access::kToken, 200,
       JsonHandler{&RestApi::ValidateExperiment},
       R"json({"summary": "Dry run: the checks of creating an experiment, )json"
       R"json(nothing created; the answer holds the spec as parsed (defaults filled in, spaces typed)", )json"
       R"json("requestBody": {"content": {"application/yaml": {}, "application/json": {}}}, )json"
       R"json("responses": {"200": {"description": "{valid: true, spec: {name, objective, spaces: [{name, )json"
       R"json(params: [...], complexity_bits}], system, algorithm, early_stopping, placement, cost, budget, )json"
       R"json(executor}, warnings: [what may not go as meant, e.g. a promotion budget too small for any )json"
       R"json(trial to reach the last rung]}"}, "400": {"description": "invalid spec; the message names the field path", )json"
       R"json("content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}})json"},
      {"GET", "/api/v1/experiments/{id}", Access::kToken, 200, JsonHandler{&RestApi::GetExperiment},
       R"json({"summary": "One experiment with trial counts", "parameters": [{"name": "id", "in": "path", )json"
       R"json("required": true, "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Expe)json"
       R"json(riment"}}}, "description": "experiment"}, "404": {"description": "no such experiment"}}})json"},
      {"POST", "/api/v1/experiments/{id}:cancel", Access::kToken, 200,
       JsonHandler{&RestApi::CancelExperiment},
       R"json({"summary": "Cancel: pending and running trials are cancelled", "parameters": [{"name": "id", )json"
       R"json("in": "path", "required": true, "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"description": "cancelled"}, "409": {"description": "already ended"}}})json"},
      {"GET", "/api/v1/experiments/{id}/trials", Access::kToken, 200,
       JsonHandler{&RestApi::ListTrials},
       R"json({"summary": "List trials by number, a page at a time: by keyset (after: the next_after of the )json"
       R"json(previous page) or by offset", "parameters": [{"name": "id", "in": "path", "required": true, )json"
       R"json("schema": {"type": "integer"}}, {"name": "state", "in": "query", "schema": {"type": "string"}}, )json"
       R"json({"name": "space", "in": "query", "schema": {"type": "string"}}, {"name": "offset", "in": "query", )json"
       R"json("schema": {"type": "integer"}}, {"name": "limit", "in": "query", "schema": {"type": "integer"}}, )json"
       R"json({"name": "after", "in": "query", "schema": {"type": "integer"}, "description": "only trials )json"
       R"json(numbered above this (not with offset)"}, {"name": "since", "in": "query", "schema": {"type": "string"}, )json"
       R"json("description": "a cursor from an earlier answer: only the trials changed since it was taken"}], )json"
       R"json("responses": {"200": {"description": "{trials: [...], offset, limit, next_after (null on the last )json"
       R"json(page), cursor (for since; take the first page's when reading several)}"}, )json"
       R"json("409": {"description": "since: a cursor of another store; read again without since"}}})json"},
      {"GET", "/api/v1/experiments/{id}/best", Access::kToken, 200,
       JsonHandler{&RestApi::BestTrial},
       R"json({"summary": "The best completed trial; while none completed, the trial of any state with the )json"
       R"json(best reported value (partial: true, best_step, best_metrics, checkpoint_step)", )json"
       R"json("parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Tria)json"
       R"json(l"}}}, "description": "best trial, with partial, best_step and best_metrics"}, )json"
       R"json("404": {"description": "none completed and none reported the objective yet"}}})json"},
      {"GET", "/api/v1/experiments/{id}/pareto", Access::kToken, 200, JsonHandler{&RestApi::Pareto},
       R"json({"summary": "The Pareto front: the feasible completed trials no other feasible one dominates )json"
       R"json(in every objective (with one objective, the best value's), each with its objective values; )json"
       R"json(all=true lists every completed trial with its rank (0: on the front; null: infeasible) and )json"
       R"json(why it is infeasible", "parameters": [{"name": "id", "in": "path", "required": true, )json"
       R"json("schema": {"type": "integer"}}, {"name": "all", "in": "query", "schema": {"type": "boolean"}}], )json"
       R"json("responses": {"200": {"description": "{objectives, constraints, completed, feasible, front_size, )json"
       R"json(trials: [trial with values, feasible, infeasible_reasons, rank]}"}}})json"},
      {"GET", "/api/v1/experiments/{id}/measurements", Access::kToken, 200,
       JsonHandler{&RestApi::LearningCurves},
       R"json({"summary": "Learning curves: every trial's metric by step, )json"
       R"json(thinned to about max_points points in all (each curve keeps at least its first and last step)", )json"
       R"json("parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}, )json"
       R"json({"name": "metric", "in": "query", "schema": {"type": "string"}, )json"
       R"json("description": "default: the objective's metric"}, {"name": "max_points", "in": "query", )json"
       R"json("schema": {"type": "integer", "minimum": 1, "maximum": 1000000, "default": 20000}}, )json"
       R"json({"name": "since", "in": "query", "schema": {"type": "string"}, "description": "a cursor from an )json"
       R"json(earlier answer: only the points written since, not thinned; a trial marked replace lost )json"
       R"json(points since and comes whole"}], )json"
       R"json("responses": {"200": {"description": "{metric, points, downsampled, cursor, trials: [{trial_id, )json"
       R"json(steps: [...], values: [...], replace (with since)}]}"}, "404": {"description": "no such experiment"}, )json"
       R"json("409": {"description": "since: a cursor of another store; read again without since"}}})json"},
      {"GET", "/api/v1/experiments/{id}/system-tuning", Access::kToken, 200,
       JsonHandler{&RestApi::SystemTuning},
       R"json({"summary": "System-parameter co-tuning per device class: for each of the experiment's workloads, )json"
       R"json(measured samples/s against the tuned parameters, one line per bucket of the searched batch size, )json"
       R"json(and what a trial of that batch size starts from", "parameters": [{"name": "id", "in": "path", )json"
       R"json("required": true, "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"description": "{workloads: [{workload, tunable, )json"
       R"json(device_classes: [{device_class, buckets: [{batch_size, chosen, points: [{tunables, samples_per_sec, )json"
       R"json(observations}]}]}]}]}"}, "404": {"description": "no such experiment"}}})json"},
      {"POST", "/api/v1/experiments/{id}/trials:suggest", Access::kToken, 200,
       JsonHandler{&RestApi::SuggestTrials},
       R"json({"summary": "Ask: new trials for a client experiment, leased to the caller", )json"
       R"json("parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}], )json"
       R"json("requestBody": {"content": {"application/json": {"schema": {"type": "object", )json"
       R"json("properties": {"count": {"type": "integer", "minimum": 1, "maximum": 1000}}}}}}, )json"
       R"json("responses": {"200": {"description": "{trials: [...]}, each with the seed to run it with (as a )json"
       R"json(worker's lease carries one)"}, "409": {"description": "not a client experiment, or ended"}}})json"},
      {"GET", "/api/v1/trials/{id}", Access::kToken, 200, JsonHandler{&RestApi::GetTrial},
       R"json({"summary": "One trial with its measurements", "parameters": [{"name": "id", "in": "path", )json"
       R"json("required": true, "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Tria)json"
       R"json(l"}}}, "description": "trial"}}})json"},
      {"POST", "/api/v1/trials/{id}/measurements", Access::kToken, 200,
       JsonHandler{&RestApi::ReportMeasurement},
       R"json({"summary": "Tell one step; idempotent per step", "parameters": [{"name": "id", "in": "path", )json"
       R"json("required": true, "schema": {"type": "integer"}}], )json"
       R"json("requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Report"}}})json"
       R"json(}, "responses": {"200": {"description": "{decision: continue | prune | stop | pause}"}}})json"},
      {"POST", "/api/v1/trials/{id}:complete", Access::kToken, 200,
       JsonHandler{&RestApi::CompleteTrial},
       R"json({"summary": "Tell the final metrics (the last step's when omitted)", "parameters": [{"name": "id", )json"
       R"json("in": "path", "required": true, "schema": {"type": "integer"}}], )json"
       R"json("responses": {"200": {"description": "completed"}}})json"},
      {"POST", "/api/v1/trials/{id}:fail", Access::kToken, 200, JsonHandler{&RestApi::FailTrial},
       R"json({"summary": "The trial failed, with a reason", "parameters": [{"name": "id", "in": "path", )json"
       R"json("required": true, "schema": {"type": "integer"}}], "responses": {"200": {"description": "failed"}}})json"},
      {"GET", "/api/v1/workers", Access::kToken, 200, JsonHandler{&RestApi::ListWorkers},
       R"json({"summary": "Workers with their devices; each has a state: live (seen within the lease timeout, )json"
       R"json(placed on), silent (not seen since, not placed on) or gone (it stopped and said so, or was unseen )json"
       R"json(for several lease timeouts)", )json"
       R"json("parameters": [{"name": "include_gone", "in": "query", "schema": {"type": "boolean", )json"
       R"json("default": false}, "description": "also list the gone workers not pruned yet"}], )json"
       R"json("responses": {"200": {"description": "{workers: [...]}"}}})json"},
      {"GET", "/api/v1/events", Access::kStream, 200, RawHandler{&RestApi::Events},
       R"json({"summary": "Server-Sent Events: experiment.created, experiment.finished, trial.created, )json"
       R"json(trial.reported, trial.requeued (a lease expired, its answer was lost or its worker left: pending )json"
       R"json(again), trial.paused (at a rung, )json"
       R"json(with or without its checkpoint), )json"
       R"json(trial.restarted (its checkpoint was missing or unusable: from step 0 again, with the reason), )json"
       R"json(trial.cotuning_stopped (the program ran another value of a system parameter than the one asked for: )json"
       R"json(the trial is not probed further, with the parameter and the reason), )json"
       R"json(trial.system_unknown (the program running the trial does not know a system parameter of the spec: ne)json"
       R"json(ither applied nor co-tuned, with the parameter), )json"
       R"json(trial.system_capped (the spec allows more threads than the device has usable cores: the trial is ask)json"
       R"json(ed for at most that many, with the parameter and the limit), trial.finished, )json"
       R"json(worker.registered (perhaps again, under its old id), )json"
       R"json(worker.gone (unseen for several lease timeouts, or left: true when it stopped and said so) )json"
       R"json((and lagged when events were dropped or, )json"
       R"json(between replicas, may have been missed: re-read)", "parameters": [{"name": "access_token", )json"
       R"json("in": "query", "schema": {"type": "string"}, "description": "the server token, )json"
       R"json(for clients that cannot send an Authorization header (a browser's EventSource)"}], )json"
       R"json("responses": {"200": {"description": "text/event-stream"}}})json"},
  };
  return kRoutes;
}

}  // namespace hpo::server

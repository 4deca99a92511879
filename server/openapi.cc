// The OpenAPI 3 description of the REST API, served at /openapi.json.
// tests/rest_api_test.cc checks that every route here answers and that
// every route the server answers is here.
#include "server/api.h"

namespace hpo::server {

const std::string& RestApi::OpenApi() {
  static const std::string kDoc = R"json({
  "openapi": "3.0.3",
  "info": {"title": "HeteroTune", "version": "1",
           "description": "Hardware-aware hyperparameter search. Errors are {\"error\": {\"code\", \"message\"}}; with a server token every route but /healthz and the dashboard's static files needs 'Authorization: Bearer <token>' (/api/v1/events also takes ?access_token=, for browsers' EventSource)."},
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "schemas": {
      "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}}}}},
      "Counts": {"type": "object", "properties": {"pending": {"type": "integer"}, "leased": {"type": "integer"},
        "running": {"type": "integer"}, "paused": {"type": "integer"}, "completed": {"type": "integer"}, "pruned": {"type": "integer"},
        "failed": {"type": "integer"}, "cancelled": {"type": "integer"}, "total": {"type": "integer"}}},
      "Experiment": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
        "state": {"type": "string", "enum": ["running", "completed", "cancelled", "failed"]},
        "reason": {"type": "string"}, "created_ms": {"type": "integer"}, "finished_ms": {"type": "integer", "nullable": true},
        "spaces": {"type": "array", "items": {"type": "string"}}, "spec": {"type": "object"},
        "trials": {"$ref": "#/components/schemas/Counts"}}},
      "Trial": {"type": "object", "properties": {"id": {"type": "integer"}, "experiment_id": {"type": "integer"},
        "number": {"type": "integer"}, "space": {"type": "string"}, "params": {"type": "object"},
        "system": {"type": "object"},
        "priority": {"type": "number", "description": "its search space's share of the budget when the trial was created (search/ranking.h)"},
        "state": {"type": "string", "enum": ["pending", "leased", "running", "paused", "completed", "pruned", "failed", "cancelled"]},
        "attempt": {"type": "integer", "description": "leases of its current segment"}, "lease_owner": {"type": "string"},
        "level": {"type": "integer", "description": "promotion-type early stopping: the rung it runs toward or is paused at"},
        "stop_step": {"type": "integer", "nullable": true, "description": "where its current lease pauses; null: at its end"},
        "resume_step": {"type": "integer", "description": "the checkpoint step its current segment resumed after; 0: from scratch"},
        "final_metrics": {"type": "object", "nullable": true}, "reason": {"type": "string"},
        "measurements": {"type": "array", "items": {"$ref": "#/components/schemas/Measurement"}}}},
      "Measurement": {"type": "object", "properties": {"step": {"type": "integer"}, "metrics": {"type": "object"},
        "samples_per_sec": {"type": "number"}, "system": {"type": "object"}, "created_ms": {"type": "integer"}}},
      "Report": {"type": "object", "required": ["step", "metrics"], "properties": {"step": {"type": "integer"},
        "metrics": {"type": "object", "additionalProperties": {"type": "number"}},
        "samples_per_sec": {"type": "number"}, "system": {"type": "object"}}}
    }
  },
  "security": [{"bearer": []}],
  "paths": {
    "/healthz": {"get": {"summary": "Liveness (no auth)", "security": [], "responses": {"200": {"description": "ok"}}}},
    "/readyz": {"get": {"summary": "Readiness: the store answers", "responses": {"200": {"description": "ready"}, "503": {"description": "store unavailable"}}}},
    "/metrics": {"get": {"summary": "Prometheus text format", "responses": {"200": {"description": "metrics"}}}},
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3"}}}},
    "/api/v1/experiments": {
      "get": {"summary": "List experiments, newest first",
              "parameters": [{"name": "offset", "in": "query", "schema": {"type": "integer"}}, {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
              "responses": {"200": {"description": "{experiments: [...]}"}}},
      "post": {"summary": "Create an experiment from a spec (YAML or JSON body)",
               "requestBody": {"content": {"application/yaml": {}, "application/json": {}}},
               "responses": {"201": {"description": "created"}, "400": {"description": "invalid spec; the message names the field path", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
    "/api/v1/experiments:validate": {"post": {"summary": "Dry run: the checks of creating an experiment, nothing created; the answer holds the spec as parsed (defaults filled in, spaces typed)",
      "requestBody": {"content": {"application/yaml": {}, "application/json": {}}},
      "responses": {"200": {"description": "{valid: true, spec: {name, objective, spaces: [{name, params: [...], complexity_bits}], system, algorithm, early_stopping, placement, cost, budget, executor}}"}, "400": {"description": "invalid spec; the message names the field path", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
    "/api/v1/experiments/{id}": {"get": {"summary": "One experiment with trial counts",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Experiment"}}}, "description": "experiment"}, "404": {"description": "no such experiment"}}}},
    "/api/v1/experiments/{id}:cancel": {"post": {"summary": "Cancel: pending and running trials are cancelled",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"description": "cancelled"}, "409": {"description": "already ended"}}}},
    "/api/v1/experiments/{id}/trials": {"get": {"summary": "List trials by number",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}},
                     {"name": "state", "in": "query", "schema": {"type": "string"}}, {"name": "space", "in": "query", "schema": {"type": "string"}},
                     {"name": "offset", "in": "query", "schema": {"type": "integer"}}, {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
      "responses": {"200": {"description": "{trials: [...], offset, limit}"}}}},
    "/api/v1/experiments/{id}/best": {"get": {"summary": "The best completed trial",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Trial"}}}, "description": "best trial"}, "404": {"description": "none completed yet"}}}},
    "/api/v1/experiments/{id}/measurements": {"get": {"summary": "Learning curves: every trial's metric by step, thinned to about max_points points in all (each curve keeps at least its first and last step)",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}},
                     {"name": "metric", "in": "query", "schema": {"type": "string"}, "description": "default: the objective's metric"},
                     {"name": "max_points", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000000, "default": 20000}}],
      "responses": {"200": {"description": "{metric, points, downsampled, trials: [{trial_id, steps: [...], values: [...]}]}"}, "404": {"description": "no such experiment"}}}},
    "/api/v1/experiments/{id}/system-tuning": {"get": {"summary": "System-parameter co-tuning per device class: for each of the experiment's workloads, measured samples/s against the tuned parameters, one line per bucket of the searched batch size, and what a trial of that batch size starts from",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"description": "{workloads: [{workload, tunable, device_classes: [{device_class, buckets: [{batch_size, chosen, points: [{tunables, samples_per_sec, observations}]}]}]}]}"}, "404": {"description": "no such experiment"}}}},
    "/api/v1/experiments/{id}/trials:suggest": {"post": {"summary": "Ask: new trials for a client experiment, leased to the caller",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 1000}}}}}},
      "responses": {"200": {"description": "{trials: [...]}"}, "409": {"description": "not a client experiment, or ended"}}}},
    "/api/v1/trials/{id}": {"get": {"summary": "One trial with its measurements",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Trial"}}}, "description": "trial"}}}},
    "/api/v1/trials/{id}/measurements": {"post": {"summary": "Tell one step; idempotent per step",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Report"}}}},
      "responses": {"200": {"description": "{decision: continue | prune | stop | pause}"}}}},
    "/api/v1/trials/{id}:complete": {"post": {"summary": "Tell the final metrics (the last step's when omitted)",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"description": "completed"}}}},
    "/api/v1/trials/{id}:fail": {"post": {"summary": "The trial failed, with a reason",
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "responses": {"200": {"description": "failed"}}}},
    "/api/v1/workers": {"get": {"summary": "Workers with their devices; each has a state: live (seen within the lease timeout, placed on), silent (not seen since, not placed on) or gone (unseen for several lease timeouts)",
      "parameters": [{"name": "include_gone", "in": "query", "schema": {"type": "boolean", "default": false}, "description": "also list the gone workers not pruned yet"}],
      "responses": {"200": {"description": "{workers: [...]}"}}}},
    "/api/v1/events": {"get": {"summary": "Server-Sent Events: experiment.created, experiment.finished, trial.created, trial.reported, trial.requeued (a lease expired: pending again), trial.paused (at a rung, with or without its checkpoint), trial.restarted (its checkpoint was missing or unusable: from step 0 again, with the reason), trial.cotuning_stopped (the program ran another value of a system parameter than the one asked for: the trial is not probed further, with the parameter and the reason), trial.system_unknown (the program running the trial does not know a system parameter of the spec: neither applied nor co-tuned, with the parameter), trial.system_capped (the spec allows more threads than the device has usable cores: the trial is asked for at most that many, with the parameter and the limit), trial.finished, worker.registered (perhaps again, under its old id), worker.gone (unseen for several lease timeouts) (and lagged when events were dropped or, between replicas, may have been missed: re-read)",
      "parameters": [{"name": "access_token", "in": "query", "schema": {"type": "string"}, "description": "the server token, for clients that cannot send an Authorization header (a browser's EventSource)"}],
      "responses": {"200": {"description": "text/event-stream"}}}}
  }
})json";
  return kDoc;
}

}  // namespace hpo::server

// The OpenAPI 3 description of the REST API, served at /openapi.json: the
// fixed parts below and, under "paths", one operation per row of the route
// table (server/http/routes.cc), so the document lists exactly the routes
// the server answers.
#include <cctype>

#include "server/http/api.h"

namespace hpo::server {

namespace {

// Everything but the paths.
constexpr const char* kFixedParts = R"json({
  "openapi": "3.0.3",
  "info": {"title": "HeteroTune", "version": "1",
           "description": "Hardware-aware hyperparameter search. Errors are {\"error\": {\"code\", \"message\"}}; with a server token every route but /healthz, /readyz and the dashboard's static files (and /metrics with --public-metrics) needs 'Authorization: Bearer <token>' (/api/v1/events also takes ?access_token=, for browsers' EventSource)."},
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
        "trials": {"$ref": "#/components/schemas/Counts"},
        "usage": {"type": "object", "description": "what its trials' stored steps used (GET one experiment only)", "properties": {
          "device_seconds": {"type": "number"}, "cost": {"type": "number", "description": "device time at the spec's cost.prices"},
          "budget": {"type": "number", "nullable": true, "description": "cost.budget"}}}}},
      "Trial": {"type": "object", "properties": {"id": {"type": "integer"}, "experiment_id": {"type": "integer"},
        "number": {"type": "integer"}, "space": {"type": "string"}, "params": {"type": "object"},
        "system": {"type": "object"},
        "priority": {"type": "number", "description": "its search space's share of the budget when the trial was created (search/ranking.h)"},
        "state": {"type": "string", "enum": ["pending", "leased", "running", "paused", "completed", "pruned", "failed", "cancelled"]},
        "attempt": {"type": "integer", "description": "leases of its current segment"}, "lease_owner": {"type": "string"},
        "level": {"type": "integer", "description": "promotion-type early stopping: the rung it runs toward or is paused at"},
        "stop_step": {"type": "integer", "nullable": true, "description": "where its current lease pauses; null: at its end"},
        "resume_step": {"type": "integer", "description": "the checkpoint step its current segment resumed after; 0: from scratch"},
        "seed": {"type": "integer", "nullable": true, "description": "the seed to run it with, from the spec's seed and the trial's number (the same as a worker's lease carries; a retry repeats it)"},
        "final_metrics": {"type": "object", "nullable": true}, "reason": {"type": "string"},
        "latest": {"type": "object", "nullable": true, "description": "its last stored step, {step, metrics}: what a running, paused, pruned or cut trial reached (null: no report yet). A trial's reports do not change its revision: a read with ?since gets new ones from .../measurements"},
        "best": {"type": "object", "nullable": true, "description": "its stored step with the best objective value, {step, metrics} (the earliest of ties; null: no report yet)"},
        "device_seconds": {"type": "number", "description": "its device time over its stored steps (Measurement.device_ms summed): training time, without time paused at a rung"},
        "device_class": {"type": "string", "nullable": true, "description": "the class of the device that trained it longest (most device time); null before its first step and for ask/tell trials"},
        "measurements": {"type": "array", "items": {"$ref": "#/components/schemas/Measurement"}},
        "events": {"type": "array", "description": "GET /trials/{id}: what happened to it between its steps, oldest first (the newest 1,000): {type, created_ms, data}, the server's trial events paused, resumed, moving, preempted, requeued, restarted, system_capped, system_unknown and cotuning_stopped", "items": {"type": "object"}},
        "devices": {"type": "array", "description": "GET /trials/{id}: the devices its steps ran on, in the order it first ran on each: device_id, device_class, worker_id, host and name (null once the worker was pruned), steps, device_seconds", "items": {"type": "object"}}}},
      "Measurement": {"type": "object", "properties": {"step": {"type": "integer"}, "metrics": {"type": "object"},
        "samples_per_sec": {"type": "number"}, "system": {"type": "object"}, "created_ms": {"type": "integer"},
        "device_ms": {"type": "integer", "description": "its device's time on the step, as the server counted it (from the lease or the previous report)"},
        "cost": {"type": "number", "description": "device_ms at the device's price under cost.prices (0 without one)"},
        "device_id": {"type": "integer", "nullable": true, "description": "the device the step ran on (null: an ask/tell client's step)"},
        "device_class": {"type": "string"}}},
      "Report": {"type": "object", "required": ["step", "metrics"], "properties": {"step": {"type": "integer"},
        "metrics": {"type": "object", "additionalProperties": {"type": "number"}},
        "samples_per_sec": {"type": "number"}, "system": {"type": "object"}}}
    }
  },
  "security": [{"bearer": []}],
  "paths": {}
})json";

}  // namespace

const std::string& RestApi::OpenApi() {
  static const std::string kDoc = [] {
    nlohmann::json doc = nlohmann::json::parse(kFixedParts);
    for (const Route& r : Routes()) {
      std::string method = r.method;
      for (char& c : method) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      // Text written in this program: parse() throws only on a typo in
      // routes.cc, which every test that starts the API would show at once.
      doc["paths"][r.path][method] = nlohmann::json::parse(r.openapi);
    }
    return doc.dump(2);
  }();
  return kDoc;
}

}  // namespace hpo::server

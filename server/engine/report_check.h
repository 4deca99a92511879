// What a trial's report and completion must be before anything of them is
// stored, in one place: Engine::Report and Engine::Complete (from REST and
// gRPC alike) check through here. Pure: the report and the spec alone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "server/engine/engine.h"
#include "server/spec/spec.h"

namespace hpo::server {

// `metrics` of a report or a completion (`field` names it in errors): an
// object of at most kMaxMetricsPerReport numbers with names of 1 to
// kMaxNameLength bytes.
Status CheckMetrics(const nlohmann::json& metrics, const std::string& field);

// A reported system setting (`field`: "system" or "applied"): null, or an
// object of at most kMaxSystemKeys keys of 1 to kMaxNameLength bytes, each
// value at most kMaxValueLength bytes as JSON and kMaxJsonDepth deep.
Status CheckSystem(const nlohmann::json& system, const std::string& field = "system");

// The report as it is stored, after every check a report passes before
// anything of it is written (InvalidArgument naming the field): its step
// within the trial's budget (CheckStep), its metrics (with the spec's
// objective a finite number), its system setting and what the program says
// it applied, and the changes it declares (at most kMaxSystemKeys, names
// of 1 to kMaxNameLength bytes). What the program applied is what the step
// ran: it is merged over the system setting.
Result<TrialReport> CheckedReport(const ExperimentSpec& spec, const TrialReport& given);

}  // namespace hpo::server

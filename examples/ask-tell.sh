#!/usr/bin/env bash
# Ask/tell over REST with curl and jq-free shell: create the experiment in
# examples/quadratic-client.yaml, then ask for trials, report 5 steps each,
# and complete them until the budget is spent.
#
#   build/server/hpo-server --store sqlite://./hpo.db &
#   examples/ask-tell.sh [http://127.0.0.1:8080]
set -euo pipefail
server=${1:-http://127.0.0.1:8080}
# Every POST says what it sends: the server refuses the form and text types
# a cross-site page could send (docs/deploy.md, "Threat model").
json=(-H 'Content-Type: application/json')
auth=()
[ -n "${HPO_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $HPO_TOKEN")
cd "$(dirname "$0")"

field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

exp=$(curl -sf "${auth[@]}" -H 'Content-Type: application/yaml' --data-binary @quadratic-client.yaml \
  "$server/api/v1/experiments" | field 'd["id"]')
echo "experiment $exp"
while :; do
  trials=$(curl -s "${auth[@]}" "${json[@]}" -d '{"count": 2}' "$server/api/v1/experiments/$exp/trials:suggest")
  ids=$(echo "$trials" | field '" ".join(str(t["id"]) for t in d.get("trials", []))')
  [ -z "$ids" ] && break
  for id in $ids; do
    x=$(echo "$trials" | field "[t for t in d['trials'] if t['id'] == $id][0]['params']['x']")
    for step in 0 1 2 3 4; do
      loss=$(python3 -c "print(($x - 1.5) ** 2 + 1.0 / ($step + 1))")
      decision=$(curl -sf "${auth[@]}" "${json[@]}" -d "{\"step\": $step, \"metrics\": {\"loss\": $loss}}" \
        "$server/api/v1/trials/$id/measurements" | field 'd["decision"]')
      [ "$decision" = continue ] || break
    done
    [ "$decision" = continue ] && curl -sf "${auth[@]}" "${json[@]}" -d '{}' "$server/api/v1/trials/$id:complete" >/dev/null
    echo "trial $id: x=$x $decision"
  done
done
curl -sf "${auth[@]}" "$server/api/v1/experiments/$exp/best" | field '"best:", d["params"], d["final_metrics"]'

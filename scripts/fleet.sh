#!/usr/bin/env bash
# Starts a development fleet: one networked hub and one sim agent per
# inventory file, each with its own state directory and machine ID, so a
# Linux box can stand in for an Apple Silicon Mac or an 8-GPU server.
#
#   scripts/fleet.sh [DIR]      # DIR holds everything (default ./.fleet)
#
# Every machine belongs to tenant "acme" in region "local" unless the file's
# name says otherwise: OWNER=globex scripts/fleet.sh puts them all with
# globex. Stop the fleet with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.fleet}
owner=${OWNER:-acme}
region=${REGION:-local}
port=${PORT:-8443}
admin=${ADMIN:-127.0.0.1:7480}
mkdir -p "$dir"
make -s build
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM

bin/einsora-hub serve --data "$dir/hub" --listen "127.0.0.1:$port" --admin "$admin" --region "$region" --allow-sim \
	>"$dir/hub.log" 2>&1 &
pids+=($!)
hub() { bin/einsora-hub --hub "http://$admin" --data "$dir/hub" "$@"; }
for _ in $(seq 1 50); do hub machine ls >/dev/null 2>&1 && break; sleep 0.2; done
hub tenant create "$owner" 2>/dev/null || true

for inv in scripts/fleet/*.json; do
	name=$(basename "$inv" .json)
	state="$dir/agents/$name"
	if [ ! -f "$state/hub.json" ]; then
		token=$(hub token create --owner "$owner" --region "$region" --ttl 10m)
		bin/einsora-agent enroll --hub "https://127.0.0.1:$port" --token "$token" --state-dir "$state" --name "$name"
	fi
	bin/einsora-agent run --state-dir "$state" --drivers sim --inventory-file "$inv" >"$dir/$name.log" 2>&1 &
	pids+=($!)
	echo "agent $name running (log: $dir/$name.log)"
done
echo "fleet up. Try: bin/einsora-hub --data $dir/hub machine ls"
wait

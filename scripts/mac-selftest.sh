#!/usr/bin/env bash
# mac-selftest.sh IMAGE_URL: checks on a Mac that the vz driver runs a VM
# end to end. It builds and signs the binaries, runs `einsora-hub solo`
# with the vz driver, boots a small Linux VM from IMAGE_URL (an https URL
# of a raw disk image, .gz allowed; see docs/drivers.md for the image
# string), parks it and runs it again, restarts the agent and checks the
# VM was adopted, not restarted, then removes it. One PASS/FAIL line per
# step; exit 1 if any failed. Needs Xcode's command line tools and Go.
set -uo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 IMAGE_URL" >&2
	exit 2
fi
IMAGE=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/einsora-selftest.XXXXXX")
DATA=$WORK/hub
BIN=$WORK/bin
ADMIN=127.0.0.1:${EINSORA_SELFTEST_PORT:-7499}
export EINSORA_HUB=http://$ADMIN
BOOT_TIMEOUT=${EINSORA_SELFTEST_TIMEOUT:-20m}
SOLO_PID=
FAILED=0

pass() { printf 'PASS  %s\n' "$1"; }
fail() { printf 'FAIL  %s: %s\n' "$1" "$2"; FAILED=1; }
hub() { "$BIN/einsora-hub" "$@" --data "$DATA"; }

cleanup() {
	[ -n "$SOLO_PID" ] && kill "$SOLO_PID" 2>/dev/null && wait "$SOLO_PID" 2>/dev/null
	if [ "$FAILED" = 0 ]; then rm -rf "$WORK"; else echo "logs kept in $WORK"; fi
}
trap cleanup EXIT

start_solo() {
	"$BIN/einsora-hub" solo --data "$DATA" --admin "$ADMIN" --drivers vz >>"$WORK/solo.log" 2>&1 &
	SOLO_PID=$!
	for _ in $(seq 1 100); do
		hub machine ls >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	return 1
}

stop_solo() {
	kill -TERM "$SOLO_PID" 2>/dev/null
	wait "$SOLO_PID" 2>/dev/null
	SOLO_PID=
}

bundle() { find "$DATA/agent/vz/bundles" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -n 1; }
helper_pid() { cat "$(bundle)/helper.pid" 2>/dev/null; }

# 1. Build with cgo (the shim over Virtualization.framework) and sign with
# the virtualization entitlement: without it no VM starts.
step="build and sign"
if (cd "$ROOT" && CGO_ENABLED=1 go build -o "$BIN/" ./cmd/einsora-hub ./cmd/einsora-agent) >"$WORK/build.log" 2>&1 &&
	codesign --force --sign - --entitlements "$ROOT/packaging/homebrew/einsora-agent.entitlements" "$BIN/einsora-hub" >>"$WORK/build.log" 2>&1 &&
	codesign --force --sign - --entitlements "$ROOT/packaging/homebrew/einsora-agent.entitlements" "$BIN/einsora-agent" >>"$WORK/build.log" 2>&1; then
	pass "$step"
else
	fail "$step" "see $WORK/build.log"
	exit 1
fi

# 2. Solo with vz offers the driver: the build has the shim and its probe
# answers.
step="solo offers vz"
if start_solo && hub machine show "$(hub machine ls --json | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -n 1)" | grep -q 'drivers:.*vz'; then
	pass "$step"
else
	fail "$step" "see $WORK/solo.log"
	exit 1
fi

# 3. A Linux VM boots from the image: fetched into the image cache, disk
# made, helper started, guest running and writing its serial console.
step="boot a Linux VM"
ID=$(hub workload create --tenant local --name selftest --kind vm --class cpu-2 --region local --image "$IMAGE" 2>>"$WORK/solo.log")
if [ -n "$ID" ] && hub workload wait "$ID" --state running --timeout "$BOOT_TIMEOUT" >/dev/null 2>&1 && sleep 10 && [ -s "$(bundle)/console.log" ]; then
	pass "$step"
else
	fail "$step" "workload ${ID:-not created}; see $WORK/solo.log and $(bundle)/helper.log"
	exit 1
fi

# 4. Park stops the guest and keeps the bundle (disk, MAC, identity); run
# starts the same VM again from it.
step="park and run again"
MAC=$(cat "$(bundle)/mac")
if hub workload park "$ID" >/dev/null && hub workload wait "$ID" --state stopped --timeout 2m >/dev/null &&
	[ -z "$(helper_pid)" ] && [ -f "$(bundle)/disk.img" ] &&
	hub workload run "$ID" >/dev/null && hub workload wait "$ID" --state running --timeout 5m >/dev/null &&
	[ "$(cat "$(bundle)/mac")" = "$MAC" ]; then
	pass "$step"
else
	fail "$step" "see $WORK/solo.log"
fi

# 5. Restarting the agent leaves the VM running: its helper (same pid)
# outlives the agent and the new agent adopts it.
step="agent restart adopts the VM"
PID=$(helper_pid)
stop_solo
if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null && start_solo &&
	hub workload wait "$ID" --state running --timeout 2m >/dev/null &&
	[ "$(helper_pid)" = "$PID" ] && grep -q "adopted helper" "$WORK/solo.log"; then
	pass "$step"
else
	fail "$step" "helper pid before ${PID:-none}, after $(helper_pid); see $WORK/solo.log"
fi

# 6. Remove stops the VM and deletes its bundle; the image stays cached.
step="remove"
B=$(bundle)
if hub workload rm "$ID" >/dev/null; then
	for _ in $(seq 1 300); do
		[ -d "$B" ] || break
		sleep 0.2
	done
fi
if [ -n "$B" ] && [ ! -d "$B" ] && ! kill -0 "$PID" 2>/dev/null && [ -n "$(ls "$DATA/agent/vz/images" 2>/dev/null)" ]; then
	pass "$step"
else
	fail "$step" "bundle ${B:-none} still there or helper alive"
fi

exit "$FAILED"

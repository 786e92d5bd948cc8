#!/usr/bin/env bash
# Installs the .debs into a clean Debian 12 with systemd as PID 1 (a
# container of the local Docker Engine; no image registry) and checks what
# Debian users rely on:
#   1. the hub and the agent reach active with Type=notify; the agent enrols;
#   2. a sim workload runs;
#   3. installing the next version over it keeps the workload running, on
#      the same attempt;
#   4. systemctl restart einsora-agent keeps it running, on the same attempt;
#   5. remove stops the services and keeps state and conffiles; purge
#      deletes them.
# The root filesystem is built once with mmdebstrap from this machine's apt
# mirror and cached in /var/cache/einsora-deb-test. Every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
log() { printf '[deb-install-test %3ds] %s\n' $(($(date +%s) - start)) "$*"; }
fail() { log "FAIL: $*"; exit 1; }

command -v docker >/dev/null && docker info >/dev/null 2>&1 || fail "no Docker Engine answers"
if ! command -v mmdebstrap >/dev/null; then
	log "installing mmdebstrap"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi

arch=$(dpkg --print-architecture)
work=$(mktemp -d)
c=einsora-deb-test-$$
cleanup() {
	docker rm -f "$c" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

# Two versions of both packages, so one can be installed over the other.
v1=0.0.1~test1
v2=0.0.1~test2
log "building the .debs of $v1 and $v2"
scripts/build-deb.sh "$v1" "$arch" "$work/v1" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build $v1"; }
scripts/build-deb.sh "$v2" "$arch" "$work/v2" >>"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build $v2"; }

# The mirror this machine's apt uses; nothing else is reachable.
mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -m1 '/debian/\?$' || true)
if [ -z "$mirror" ]; then
	mirror=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -m1 '/debian/\?$' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
include=systemd,systemd-sysv,dbus,adduser,procps
cache=/var/cache/einsora-deb-test
key=$(printf 'bookworm %s %s %s' "$arch" "$mirror" "$include" | sha256sum | cut -c1-12)
image=einsora-deb-test:$key
if ! docker image inspect "$image" >/dev/null 2>&1; then
	if [ ! -f "$cache/bookworm-$key.tar" ] || [ ! -s "$cache/bookworm-$key.tar" ]; then
		rm -rf "$cache/bookworm-$key.tar" "$cache/bookworm-$key.tar.tmp"
		log "building a Debian 12 root filesystem from $mirror (cached in $cache)"
		mkdir -p "$cache"
		timeout 600 mmdebstrap --quiet --format=tar --variant=minbase --include="$include" bookworm \
			"$cache/bookworm-$key.tar.tmp" "deb $mirror bookworm main" || fail "mmdebstrap"
		mv "$cache/bookworm-$key.tar.tmp" "$cache/bookworm-$key.tar"
	fi
	log "importing it into Docker as $image"
	docker import "$cache/bookworm-$key.tar" "$image" >/dev/null
fi

# --privileged fails on this Docker; all capabilities but SYS_RESOURCE,
# no seccomp filter and the host's cgroups let systemd run as PID 1.
log "starting systemd in $c"
docker run -d --name "$c" --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined \
	-v /sys/fs/cgroup:/sys/fs/cgroup:rw --cgroupns=host --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
	"$image" /lib/systemd/systemd >/dev/null
inc() { docker exec "$c" "$@"; }
sh_in() { docker exec "$c" sh -c "$1"; }
# waitfor SECONDS WHAT CMD...: runs CMD until it succeeds, at most SECONDS.
waitfor() {
	local limit=$1 what=$2
	shift 2
	local until=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$until" ] || fail "$what: not within ${limit}s"
		sleep 0.5
	done
}
waitfor 60 "systemd running" sh_in 's=$(systemctl is-system-running); [ "$s" = running ] || [ "$s" = degraded ]'
docker cp "$work/v1" "$c:/v1"
docker cp "$work/v2" "$c:/v2"
hub() { inc einsora-hub --data /var/lib/einsora-hub "$@"; }
active() { [ "$(inc systemctl is-active "$1" 2>/dev/null)" = active ]; }
field() { inc sh -c "einsora-hub --data /var/lib/einsora-hub workload show $1 --json" | sed -n "s/.*\"$2\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" | head -1; }

log "1. installing $v1"
out=$(inc sh -c 'dpkg -i /v1/einsora-hub_*.deb /v1/einsora-agent_*.deb 2>&1') || { echo "$out"; fail "dpkg -i $v1"; }
grep -q "einsora-agent enroll" <<<"$out" || { echo "$out"; fail "the agent's postinst does not print the enrol command"; }
waitfor 60 "einsora-hub active" active einsora-hub
[ "$(inc systemctl show -P Type einsora-hub)" = notify ] || fail "einsora-hub is not Type=notify"
[ "$(inc systemctl show -P User einsora-hub)" = einsora-hub ] || fail "einsora-hub does not run as its own user"
[ "$(inc stat -c %U /var/lib/einsora-hub/hub.db)" = einsora-hub ] || fail "the hub's store is not its user's"
inc systemctl is-enabled einsora-agent >/dev/null || fail "einsora-agent is not enabled"
active einsora-agent && fail "einsora-agent started before it was enrolled"
# The admin's flags go in the conffiles; the sim driver needs no runtime,
# and a hub takes machines offering it only with --allow-sim.
inc sed -i 's/^EINSORA_AGENT_ARGS=.*/EINSORA_AGENT_ARGS="--drivers sim"/' /etc/default/einsora-agent
inc sed -i 's/^EINSORA_HUB_ARGS="\(.*\)"/EINSORA_HUB_ARGS="\1 --allow-sim"/' /etc/default/einsora-hub
inc systemctl restart einsora-hub || fail "einsora-hub does not restart with --allow-sim"
waitfor 60 "einsora-hub active" active einsora-hub
hub tenant create acme >/dev/null
token=$(hub token create --owner acme --region local 2>/dev/null) || fail "token create"
inc einsora-agent enroll --hub https://127.0.0.1:8443 --token "$token" >/dev/null || fail "enroll"
inc systemctl start einsora-agent || fail "einsora-agent does not start once enrolled"
waitfor 30 "einsora-agent active" active einsora-agent
[ "$(inc systemctl show -P Type einsora-agent)" = notify ] || fail "einsora-agent is not Type=notify"
# The sim driver runs no process, so what keeps a real workload's process
# alive across a restart is checked as the unit systemd loaded.
[ "$(inc systemctl show -P KillMode einsora-agent)" = process ] || fail "einsora-agent is not KillMode=process"
waitfor 60 "the machine online" sh_in 'einsora-hub --data /var/lib/einsora-hub machine ls --json | grep -q "\"online\": true"'
log "1. ok: hub and agent active (Type=notify), the agent enrolled"

id=$(hub workload create --tenant acme --name web --kind container --class cpu-1 --region local --image 'sim:start-delay=1s') ||
	fail "workload create"
hub workload wait "$id" --state running --timeout 60s >/dev/null 2>&1 || fail "workload $id does not run"
attempt=$(field "$id" attempt)
[ -n "$attempt" ] || fail "no attempt for $id"
log "2. ok: workload $id runs, attempt $attempt"

log "3. installing $v2 over it"
out=$(inc sh -c 'dpkg -i --force-confold /v2/einsora-hub_*.deb /v2/einsora-agent_*.deb 2>&1') || { echo "$out"; fail "dpkg -i $v2"; }
[ "$(inc einsora-agent version)" = "$v2" ] || fail "einsora-agent is not $v2 after the upgrade"
waitfor 60 "einsora-hub active after the upgrade" active einsora-hub
waitfor 60 "einsora-agent active after the upgrade" active einsora-agent
inc grep -q -- '--drivers sim' /etc/default/einsora-agent || fail "the upgrade replaced the admin's /etc/default/einsora-agent"
waitfor 60 "the agent reporting $v2" sh_in "einsora-hub --data /var/lib/einsora-hub machine ls --json | grep -q '\"agent_version\": \"$v2\"'"
[ "$(field "$id" state)" = running ] || fail "workload $id is $(field "$id" state) after the upgrade"
[ "$(field "$id" attempt)" = "$attempt" ] || fail "workload $id is on attempt $(field "$id" attempt) after the upgrade, was $attempt"
log "3. ok: after the upgrade $id still runs, attempt $attempt"

pid=$(inc systemctl show -P MainPID einsora-agent)
inc systemctl restart einsora-agent || fail "restart einsora-agent"
waitfor 30 "einsora-agent active after restart" active einsora-agent
[ "$(inc systemctl show -P MainPID einsora-agent)" != "$pid" ] || fail "the agent's process did not change on restart"
waitfor 60 "the machine online after restart" sh_in 'einsora-hub --data /var/lib/einsora-hub machine ls --json | grep -q "\"online\": true"'
[ "$(field "$id" state)" = running ] || fail "workload $id is $(field "$id" state) after a restart"
[ "$(field "$id" attempt)" = "$attempt" ] || fail "workload $id changed attempt on a restart"
log "4. ok: after systemctl restart $id still runs, attempt $attempt"

out=$(inc dpkg -r einsora-agent 2>&1) || { echo "$out"; fail "dpkg -r einsora-agent"; }
active einsora-agent && fail "einsora-agent still active after remove"
inc test ! -e /usr/bin/einsora-agent || fail "remove left /usr/bin/einsora-agent"
inc test ! -e /lib/systemd/system/einsora-agent.service || fail "remove left the unit"
inc test -e /etc/default/einsora-agent || fail "remove deleted the conffile"
inc test -e /var/lib/einsora-agent/agent.key || fail "remove deleted the agent's key"
out=$(inc dpkg -P einsora-agent 2>&1) || { echo "$out"; fail "dpkg -P einsora-agent"; }
grep -q "purged /var/lib/einsora-agent" <<<"$out" || { echo "$out"; fail "purge does not say what it deleted"; }
inc test ! -e /var/lib/einsora-agent || fail "purge left /var/lib/einsora-agent"
inc test ! -e /etc/default/einsora-agent || fail "purge left the conffile"

out=$(inc dpkg -r einsora-hub 2>&1) || { echo "$out"; fail "dpkg -r einsora-hub"; }
active einsora-hub && fail "einsora-hub still active after remove"
inc test -e /var/lib/einsora-hub/hub.db || fail "remove deleted the hub's store"
out=$(inc dpkg -P einsora-hub 2>&1) || { echo "$out"; fail "dpkg -P einsora-hub"; }
inc test ! -e /var/lib/einsora-hub || fail "purge left /var/lib/einsora-hub"
inc test ! -e /etc/default/einsora-hub || fail "purge left the conffile"
[ -z "$(inc sh -c 'ls /etc/systemd/system/multi-user.target.wants/ | grep einsora || true')" ] || fail "purge left enablement links"
log "5. ok: remove keeps state and conffiles, purge deletes them"
log "passed in $(($(date +%s) - start))s"

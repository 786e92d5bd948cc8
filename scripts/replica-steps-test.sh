#!/usr/bin/env bash
# Runs docs/operations.md's "Setting up replicas on PostgreSQL, step by
# step" on one host, on free loopback ports (issue 18):
#   - a throwaway PostgreSQL from Debian's packages (initdb, postgres);
#   - step 1: the docs' SQL makes the user and the database;
#   - step 2: the docs' command makes the first data directory;
#   - step 3: it is copied, modes kept, to two more replicas;
#   - step 4: three replicas run on the one store and region;
#   - step 5: HAProxy in TCP mode, health-checking /readyz, in front of
#     them; three sim agents enrol and run through it;
#   - step 6: the admin verbs against the replicas: a workload created on
#     replica 2 runs, replica 3 lists it;
#   - then the replica leading eu-1 (if it holds a poll) is killed: every
#     agent polls a surviving replica, through HAProxy, a survivor takes
#     the lease over, and the workload stays running where it was, on the
#     same attempt.
# Each step's command is first looked up, word for word, in the docs, so a
# change of the text that the script does not follow fails it. The host
# names, paths and ports of the text are swapped for this host's (hub.example.com,
# the load balancer, becomes localhost; hub-N.example.com becomes
# 127.0.0.1 on replica N's ports; db becomes the throwaway server).
# Every wait is bounded; everything started is stopped, and the temporary
# directory removed, on exit. As root, PostgreSQL runs as the postgres
# user (initdb refuses root). Needs python3 (free ports), curl and haproxy.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# The log goes to the script's stderr as it was at start, so that a step's
# redirected output does not swallow it.
exec 3>&2
log() { printf '[replica-steps %3ds] %s\n' $(($(date +%s) - start)) "$*" >&3; }
fail() {
	log "FAIL: $*"
	exit 1
}

doc=docs/operations.md
section='### Setting up replicas on PostgreSQL, step by step'
# The section's text on one line, whitespace squeezed and line
# continuations dropped, so a command can be looked up as one string.
text=$(awk -v s="$section" '$0 == s { on = 1; next } on && /^##/ { exit } on' "$doc" |
	sed 's/\\$//' | tr '\n' ' ' | tr -s ' \t' '  ')
[ -n "$text" ] || fail "$doc has no section \"$section\""
# step N DOCS-TEXT: the docs must say DOCS-TEXT (whitespace squeezed) in
# the section; prints it under the step's number.
step() {
	local n=$1 want
	want=$(printf '%s' "$2" | tr '\n' ' ' | tr -s ' \t' '  ')
	case $text in
	*"$want"*) ;;
	*) fail "step $n: $doc's section \"$section\" no longer says: $want" ;;
	esac
	log "step $n (docs): $want"
}
# run N CMD...: runs the adapted command of step N, printing it.
run() {
	local n=$1
	shift
	case $1 in
	hubcli) log "step $n (runs): einsora-hub --hub http://127.0.0.1:${admin[$2]} --data ${data[$2]} ${*:3}" ;;
	superuser) log "step $n (runs): psql -h $pgdir -p $pgport -U postgres -d postgres ${*:2} (the SQL above)" ;;
	*) log "step $n (runs): $*" ;;
	esac
	"$@"
}
# waitfor SECONDS WHAT CMD...: runs CMD until it succeeds, at most SECONDS.
waitfor() {
	local limit=$1 what=$2
	shift 2
	local until=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$until" ] || fail "$what: not within ${limit}s"
		sleep 0.3
	done
}

command -v python3 >/dev/null || fail "python3 is needed for free ports"
command -v curl >/dev/null || fail "curl is needed for the hubs' metrics"
command -v haproxy >/dev/null || fail "haproxy is needed (apt-get install haproxy)"
pgbin=
for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
	[ -x "$d/initdb" ] && [ -x "$d/postgres" ] && { pgbin=$d; break; }
done
[ -n "$pgbin" ] || fail "initdb and postgres not found in /usr/lib/postgresql/*/bin (apt-get install postgresql)"
psql=$pgbin/psql
[ -x "$psql" ] || psql=$(command -v psql) || fail "psql not found"

tmp=$(mktemp -d)
pids=()
pg=
cleanup() {
	local rc=$?
	set +e
	# The agents first, so the hubs have no poll left to drain; 10 s in
	# all, then SIGKILL.
	local i p until=$(($(date +%s) + 10))
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null; done
	for p in "${pids[@]}"; do
		while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ -n "$pg" ]; then
		kill -INT "$pg" 2>/dev/null # fast shutdown
		for _ in $(seq 1 100); do kill -0 "$pg" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pg" 2>/dev/null
		wait "$pg" 2>/dev/null
	fi
	if [ $rc -ne 0 ]; then
		for f in "$tmp"/*.log; do
			[ -f "$f" ] || continue
			echo "---- $(basename "$f") (last 30 lines)"
			tail -n 30 "$f"
		done
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building the binaries"
go build -o "$tmp/bin/" ./cmd/... || fail "go build"
export PATH=$tmp/bin:$PATH

# Ten free loopback ports, all bound at once so they differ.
read -r pgport lbport p0 a0 p1 a1 p2 a2 p3 a3 < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(10)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
listen=(x "$p1" "$p2" "$p3")
admin=(x "$a1" "$a2" "$a3")

# A throwaway PostgreSQL: the superuser over a unix socket without a
# password, everyone over TCP with one (as a real deployment would).
log "starting PostgreSQL ($pgbin) on 127.0.0.1:$pgport"
pgdir=$tmp/pg
mkdir -p "$pgdir"
as_pg=()
if [ "$(id -u)" = 0 ]; then
	id postgres >/dev/null 2>&1 || fail "running as root and there is no postgres user to run the server as"
	chmod 0755 "$tmp"
	chown postgres: "$pgdir"
	# setpriv execs, so $pg below is postgres itself, not a parent that
	# might leave it running.
	as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi
LC_ALL=C "${as_pg[@]}" "$pgbin/initdb" -D "$pgdir/data" -U postgres --auth-local=trust \
	--auth-host=scram-sha-256 --encoding=UTF8 --locale=C --no-sync >"$tmp/initdb.log" 2>&1 ||
	fail "initdb: $(tail -n 5 "$tmp/initdb.log")"
"${as_pg[@]}" "$pgbin/postgres" -D "$pgdir/data" -k "$pgdir" -p "$pgport" -c listen_addresses=127.0.0.1 \
	-c fsync=off -c synchronous_commit=off -c full_page_writes=off >"$tmp/postgres.log" 2>&1 &
pg=$!
waitfor 60 "PostgreSQL answers" "$psql" -h "$pgdir" -p "$pgport" -U postgres -d postgres -Atc 'select 1'
superuser() { "$psql" -h "$pgdir" -p "$pgport" -U postgres -d postgres -v ON_ERROR_STOP=1 -q "$@"; }

# Step 1: the user and the database, with the docs' SQL.
sql="CREATE USER einsora PASSWORD 'choose-a-password';
CREATE DATABASE einsora OWNER einsora;"
step 1 "$sql"
password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
run 1 superuser <<<"${sql//choose-a-password/$password}"
# The hubs read it as libpq does, from PGPASSWORD (or ~/.pgpass).
export PGPASSWORD=$password
step 1 "PGPASSWORD"
store=postgres://einsora@127.0.0.1:$pgport/einsora

# Step 2: the first data directory, on hub-1, from one start.
# Each replica's "host" is a directory: hub-N/var/lib/einsora-hub.
data=(x "$tmp/hub-1/var/lib/einsora-hub" "$tmp/hub-2/var/lib/einsora-hub" "$tmp/hub-3/var/lib/einsora-hub")
mkdir -p "$tmp"/hub-{1,2,3}/var/lib
step 2 "einsora-hub serve --data /var/lib/einsora-hub --store postgres://einsora@db/einsora --region eu-1 --name hub.example.com"
log "step 2 (runs): einsora-hub serve --data ${data[1]} --store $store --region eu-1 --name localhost --listen 127.0.0.1:$p0 --admin 127.0.0.1:$a0"
einsora-hub serve --data "${data[1]}" --store "$store" --region eu-1 --name localhost \
	--listen "127.0.0.1:$p0" --admin "127.0.0.1:$a0" >"$tmp/first.out" 2>"$tmp/first.log" &
first=$!
pids+=("$first")
# shellcheck disable=SC2016 # the docs' backticks, as text
step 2 'wait for its first line (`einsora-hub serve: admin API on …`), stop it'
waitfor 60 "step 2: the first replica's first line" grep -q '^einsora-hub serve: admin API on ' "$tmp/first.out"
log "step 2: it says: $(head -n 1 "$tmp/first.out")"
kill -TERM "$first"
for _ in $(seq 1 200); do kill -0 "$first" 2>/dev/null || break; sleep 0.1; done
kill -0 "$first" 2>/dev/null && fail "step 2: the first replica did not stop within 20s of SIGTERM"
wait "$first" || fail "step 2: the first replica exited with $? on SIGTERM"
for f in ca.key ca.crt server.key server.crt admin-token secrets-key; do
	[ -f "${data[1]}/$f" ] || fail "step 2: ${data[1]} has no $f"
done

# Step 3: copy it, modes kept, to hub-2 and hub-3 (ssh becomes a local
# shell; the paths are each "host's" /var/lib).
step 3 "tar -C /var/lib -cpf - einsora-hub | ssh hub-2.example.com tar -C /var/lib -xpf -"
for n in 2 3; do
	log "step 3 (runs): tar -C $tmp/hub-1/var/lib -cpf - einsora-hub | tar -C $tmp/hub-$n/var/lib -xpf -"
	tar -C "$tmp/hub-1/var/lib" -cpf - einsora-hub | tar -C "$tmp/hub-$n/var/lib" -xpf -
done
for n in 1 2 3; do
	[ "$(stat -c %a "${data[n]}")" = 700 ] || fail "step 3: ${data[n]} has mode $(stat -c %a "${data[n]}"), want 700"
	for f in ca.key server.key admin-token secrets-key; do
		m=$(stat -c %a "${data[n]}/$f")
		[ "$m" = 600 ] || fail "step 3: ${data[n]}/$f has mode $m, want 600"
	done
	cmp -s "${data[1]}/ca.key" "${data[n]}/ca.key" || fail "step 3: hub-$n's ca.key differs"
done
log "step 3: ca.key, server.key, admin-token and secrets-key are 0600 on every replica"

# Step 4: three replicas, one store and region, the load balancer's name
# and each its own name and URL. --listen and --admin differ since they
# share a host; --allow-sim since the agents offer the sim driver.
step 4 "einsora-hub serve --data /var/lib/einsora-hub --store postgres://einsora@db/einsora --region eu-1 --name hub.example.com --name hub-1.example.com --url https://hub-1.example.com:8443"
for n in 1 2 3; do
	args=(serve --data "${data[n]}" --store "$store" --region eu-1 --name localhost --name 127.0.0.1
		--url "https://127.0.0.1:${listen[n]}" --listen "127.0.0.1:${listen[n]}" --admin "127.0.0.1:${admin[n]}" --allow-sim)
	log "step 4 (runs): einsora-hub ${args[*]}"
	einsora-hub "${args[@]}" >"$tmp/hub-$n.out" 2>"$tmp/hub-$n.log" &
	pids+=($!)
	hubpid[n]=$!
done
for n in 1 2 3; do
	waitfor 60 "step 4: hub-$n's first line" grep -q '^einsora-hub serve: admin API on ' "$tmp/hub-$n.out"
done

# Step 5: the docs' HAProxy configuration, its addresses swapped for
# this host's.
cfg=$(awk -v s="$section" '$0 == s { on = 1; next } on && /^##/ { exit }
	on && /^   ```text$/ { inblock = 1; next } inblock && /^   ```$/ { exit } inblock { print substr($0, 4) }' "$doc")
[ -n "$cfg" ] || fail "step 5: the section has no HAProxy configuration (a \`\`\`text block)"
for want in "mode tcp" "bind :8443" "option httpchk GET /readyz" "server hub-1 hub-1.example.com:8443 check check-ssl verify none"; do
	grep -qF "$want" <<<"$cfg" || fail "step 5: the docs' HAProxy configuration has no \"$want\""
done
log "step 5 (docs): HAProxy: $(tr '\n' ';' <<<"$cfg" | tr -s ' ')"
cfg=${cfg//bind :8443/bind 127.0.0.1:$lbport}
for n in 1 2 3; do cfg=${cfg//hub-$n.example.com:8443/127.0.0.1:${listen[n]}}; done
# A stats socket, for the health checks' results.
printf 'global\n    stats socket %s\n%s\n' "$tmp/haproxy.sock" "$cfg" >"$tmp/haproxy.cfg"
log "step 5 (runs): haproxy on 127.0.0.1:$lbport in front of 127.0.0.1:$p1, :$p2, :$p3"
haproxy -c -f "$tmp/haproxy.cfg" >"$tmp/haproxy-check.log" 2>&1 || fail "haproxy -c: $(cat "$tmp/haproxy-check.log")"
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
pids+=($!)
haproxy_pid=$!
lb_ready() { : </dev/tcp/127.0.0.1/"$lbport"; }
waitfor 30 "step 5: HAProxy listens" lb_ready
# checks: each server's health check status (L7OK: /readyz answered 200).
checks() {
	python3 - "$tmp/haproxy.sock" <<'PY'
import csv, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
rows = csv.DictReader(data.decode().lstrip("# ").splitlines())
print(" ".join(f"{r['svname']}={r['check_status']}" for r in rows if r["svname"].startswith("hub-")))
PY
}
all_l7ok() { [ "$(checks)" = "hub-1=L7OK hub-2=L7OK hub-3=L7OK" ]; }
waitfor 30 "step 5: HAProxy's health checks of /readyz passing on all three" all_l7ok
log "step 5: HAProxy's health checks: $(checks)"

# The admin verbs of step 6, as on replica N's host.
step 6 "einsora-hub --hub http://127.0.0.1:7480 --data /var/lib/einsora-hub"
hubcli() {
	local n=$1
	shift
	einsora-hub --hub "http://127.0.0.1:${admin[n]}" --data "${data[n]}" "$@"
}

step 5 "einsora-agent enroll --hub https://hub.example.com:8443 --token \"\$token\""
run 6 hubcli 1 tenant create acme
for m in 1 2 3; do
	token=$(run 5 hubcli "$m" token create --owner acme --region eu-1 --ttl 10m 2>"$tmp/token-$m.log") ||
		fail "step 5: token create: $(cat "$tmp/token-$m.log")"
	log "step 5 (runs): einsora-agent enroll --hub https://localhost:$lbport --token \"\$token\" --state-dir $tmp/agent-$m --name agent-$m"
	einsora-agent enroll --hub "https://localhost:$lbport" --token "$token" \
		--state-dir "$tmp/agent-$m" --name "agent-$m" >"$tmp/enroll-$m.log" 2>&1 ||
		fail "step 5: agent-$m's enrolment: $(cat "$tmp/enroll-$m.log")"
	log "step 5 (runs): einsora-agent run --state-dir $tmp/agent-$m --drivers sim"
	einsora-agent run --state-dir "$tmp/agent-$m" --drivers sim >"$tmp/agent-$m.log" 2>&1 &
	pids+=($!)
done
online() {
	local n=$1
	[ "$(hubcli "$n" machine ls --json | grep -c '"online": true')" = 3 ]
}
waitfor 60 "step 5: three machines online" online 1

# Step 6: a workload created on replica 2, listed on replica 3.
id=$(run 6 hubcli 2 workload create --tenant acme --name web --kind container --class cpu-1 \
	--region eu-1 --image 'sim:start-delay=1s')
[ -n "$id" ] || fail "step 6: workload create printed no id"
run 6 hubcli 2 workload wait "$id" --state running --timeout 90s >"$tmp/wait.log" 2>&1 ||
	fail "step 6: $id not running within 90s: $(cat "$tmp/wait.log")"
run 6 hubcli 3 workload ls >"$tmp/ls.out"
grep -q "$id" "$tmp/ls.out" || fail "step 6: replica 3 does not list $id: $(cat "$tmp/ls.out")"
grep "$id" "$tmp/ls.out" | grep -q running || fail "step 6: replica 3 does not list $id as running: $(cat "$tmp/ls.out")"
log "step 6: replica 3 lists: $(grep "$id" "$tmp/ls.out")"

# Then a replica dies without a drain (SIGKILL): the one leading eu-1 if it
# holds a poll, else the one holding the most. Every agent must poll one
# of the two left, through HAProxy, a survivor must lead, and the workload
# must stay running where it ran, on the same attempt, with no new line in
# its timeline.
metric() { curl -fsS "http://127.0.0.1:${admin[$1]}/metrics" | awk -v m="$2" '$1 == m { print $2 + 0; found = 1 } END { if (!found) print 0 }'; }
polls() { metric "$1" einsora_hub_long_polls; }
leads() { [ "$(metric "$1" 'einsora_hub_leader{region="eu-1"}')" = 1 ]; }
held() { [ "$(($(polls 1) + $(polls 2) + $(polls 3)))" = 3 ]; }
jfield() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
waitfor 60 "three polls held" held
grep -q 'is DOWN' "$tmp/haproxy.log" && fail "HAProxy's health checks failed: $(cat "$tmp/haproxy.log")"
hubcli 3 workload show "$id" --json >"$tmp/before.json"
hubcli 3 workload timeline "$id" >"$tmp/timeline-before.txt"
victim='' most=-1
for n in 1 2 3; do
	c=$(polls "$n")
	if leads "$n"; then
		log "hub-$n holds $c poll(s) and leads eu-1"
		[ "$c" -gt 0 ] && victim=$n
	else
		log "hub-$n holds $c poll(s)"
	fi
	[ "$c" -gt "$most" ] && { best=$n most=$c; }
done
victim=${victim:-$best}
left=()
for n in 1 2 3; do [ "$n" = "$victim" ] || left+=("$n"); done
log "killing hub-$victim (SIGKILL), which holds $(polls "$victim") poll(s)"
kill -KILL "${hubpid[victim]}"
wait "${hubpid[victim]}" 2>/dev/null || true
waitfor 30 "HAProxy's health check marks hub-$victim down" grep -q "Server hubs/hub-$victim is DOWN" "$tmp/haproxy.log"
log "HAProxy's health checks: $(checks)"
held_by_left() { [ "$(($(polls "${left[0]}") + $(polls "${left[1]}")))" = 3 ]; }
waitfor 90 "the three agents polling hub-${left[0]} and hub-${left[1]}" held_by_left
log "hub-${left[0]} holds $(polls "${left[0]}") poll(s), hub-${left[1]} $(polls "${left[1]}")"
for m in 1 2 3; do
	einsora-agent status --json --state-dir "$tmp/agent-$m" >"$tmp/status-$m.json"
	h=$(jfield "$tmp/status-$m.json" hub)
	[ "$h" = "https://localhost:$lbport" ] || fail "agent-$m's hub is $h, not the load balancer"
done
log "every agent's hub is the load balancer, https://localhost:$lbport"
left_leads() { leads "${left[0]}" || leads "${left[1]}"; }
waitfor 60 "hub-${left[0]} or hub-${left[1]} leading eu-1" left_leads
for n in "${left[@]}"; do leads "$n" && leader=$n; done
# Two controller passes of the leader after it took over: had it meant to
# move or restart the workload, it would have by then.
passes() { metric "$leader" einsora_hub_admit_pass_seconds_count; }
p0=$(passes)
passed_twice() { [ "$(passes)" -ge $((p0 + 2)) ]; }
waitfor 30 "two controller passes of hub-$leader" passed_twice
log "hub-$leader leads eu-1 and has run $(($(passes) - p0)) passes since"
waitfor 30 "three machines online, as hub-$leader sees them" online "$leader"
for n in "${left[@]}"; do
	hubcli "$n" workload show "$id" --json >"$tmp/after.json"
	for k in state machine attempt; do
		b=$(jfield "$tmp/before.json" "$k") a=$(jfield "$tmp/after.json" "$k")
		[ "$a" = "$b" ] || fail "$id's $k was $b before the kill, hub-$n says $a after"
	done
done
hubcli "$leader" workload timeline "$id" >"$tmp/timeline-after.txt"
cmp -s "$tmp/timeline-before.txt" "$tmp/timeline-after.txt" ||
	fail "$id's timeline changed after the kill: $(diff "$tmp/timeline-before.txt" "$tmp/timeline-after.txt")"
log "$id is still running on $(jfield "$tmp/after.json" machine), attempt $(jfield "$tmp/after.json" attempt), timeline unchanged; 3 machines online"
kill -0 "$haproxy_pid" || fail "HAProxy died"
log "passed in $(($(date +%s) - start))s"

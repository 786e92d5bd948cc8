#!/usr/bin/env bash
# Runs the shell blocks of README.md and docs/operations.md, so documented
# commands work as written. Each file runs in a private network, mount and
# PID namespace: its own loopback (so 8443 and 7480 are free), a tmpfs on
# /var/lib, .data and $HOME, hub.example.com naming 127.0.0.1, and every
# process ended with the namespace. Its blocks run in order in one shell,
# sharing variables, with the binaries of this checkout on PATH.
#
# A shell block (```sh, ```bash or a bare ```) is run unless the line before
# it is a marker:
#   <!-- not run: REASON -->                        skipped, for REASON
#   <!-- run in background, ready when: CMD -->     started, then CMD is
#                                                   retried until it passes
# "new session; " after "<!-- " (or <!-- new session --> alone) first ends
# the namespace and everything running in it, and starts a fresh one.
# A block that fails, or a background block that is not ready within two
# minutes, fails the check. Other blocks (```json, ```text) are not shell.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(README.md docs/operations.md)
start=$(date +%s)
[ "$(id -u)" = 0 ] || { echo "docs-check: needs root for its namespaces" >&2; exit 1; }

make -s build
# $HOME moves to a scratch directory: keep Go's caches where they are.
GOPATH=$(go env GOPATH) GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE)
export GOPATH GOMODCACHE GOCACHE
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# extract FILE DIR: writes DIR/NNN.sh for each shell block, with DIR/NNN.mode
# (run, skip or bg), DIR/NNN.line and, for bg, DIR/NNN.ready.
extract() {
	awk -v dir="$2" '
	!inblock && /^```/ {
		info = substr($0, 4); gsub(/[ \t]/, "", info)
		inblock = 1; shell = (info == "" || info == "sh" || info == "bash" || info == "shell")
		if (shell) {
			marker = prev
			if (marker ~ /^<!-- new session(; | -->$)/) {
				session++
				sub(/^<!-- new session(; )?/, "<!-- ", marker)
			}
			n++; base = sprintf("%s/s%02d/%03d", dir, session + 0, n); out = base ".sh"
			system("mkdir -p " dir "/" sprintf("s%02d", session + 0))
			printf "" > out
			mode = "run"; ready = ""
			if (marker ~ /^<!-- not run: .+ -->$/) mode = "skip"
			else if (marker ~ /^<!-- run in background, ready when: .+ -->$/) {
				mode = "bg"; ready = marker
				sub(/^<!-- run in background, ready when: /, "", ready); sub(/ -->$/, "", ready)
			} else if (marker ~ /^<!--/ && marker != "<!-- -->") { print FILENAME ":" NR ": unknown marker: " prev > "/dev/stderr"; bad = 1 }
			print mode > (base ".mode"); close(base ".mode")
			print FILENAME ":" NR > (base ".line"); close(base ".line")
			if (ready != "") { print ready > (base ".ready"); close(base ".ready") }
		}
		next
	}
	inblock && /^```/ { inblock = 0; if (shell) close(out); next }
	inblock { if (shell) print > out; next }
	NF { prev = $0 }
	END { exit bad }
	' "$1"
}

# The runner, run inside the namespaces.
cat >"$work/runner.sh" <<'RUNNER'
set -e
dir=$1 root=$2 scratch=$3
ip link set lo up
mount -t tmpfs tmpfs /var/lib
mkdir -p "$root/.data" "$scratch/home"
mount -t tmpfs tmpfs "$root/.data"
printf '127.0.0.1 localhost hub.example.com\n::1 localhost\n' >"$scratch/hosts"
mount --bind "$scratch/hosts" /etc/hosts
export HOME=$scratch/home PATH=$root/bin:$PATH
unset XDG_DATA_HOME EINSORA_HUB EINSORA_ADMIN_TOKEN
cd "$root"
shopt -s expand_aliases
current=
trap 'rc=$?; if [ $rc -ne 0 ] && [ -n "$current" ]; then sed "s/^/    /" "$current.log"; echo "docs-check: $(cat "$current.line"): FAILED (exit $rc)"; fi' EXIT
for block in "$dir"/*.sh; do
	base=${block%.sh}
	where=$(cat "$base.line")
	case $(cat "$base.mode") in
	skip) echo "docs-check: $where: not run" ;;
	run)
		echo "docs-check: $where: running"
		# Sourced, not in an if: errexit must hold inside the block, and a
		# failing command ends the runner through the trap below.
		current=$base
		source "$block" >"$base.log" 2>&1
		current=
		;;
	bg)
		echo "docs-check: $where: started in the background"
		(source "$block") >"$base.log" 2>&1 &
		bgpid=$!
		until=$(($(date +%s) + 120))
		until bash -c "$(cat "$base.ready")" >/dev/null 2>&1; do
			if ! kill -0 "$bgpid" 2>/dev/null || [ "$(date +%s)" -ge "$until" ]; then
				sed 's/^/    /' "$base.log"
				echo "docs-check: $where: FAILED: not ready ($(cat "$base.ready"))"
				exit 1
			fi
			sleep 0.3
		done
		;;
	esac
done
RUNNER

for f in "${files[@]}"; do
	d=$work/$(echo "$f" | tr / _)
	mkdir -p "$d"
	extract "$f" "$d" || { echo "docs-check: $f: bad marker"; exit 1; }
	for session in "$d"/s*; do
		# -e in the runner stops at the first failing block; the timeout
		# bounds a block that never returns.
		mkdir -p "$session.scratch"
		if ! timeout 600 unshare --net --mount --pid --fork --mount-proc bash "$work/runner.sh" "$session" "$root" "$session.scratch"; then
			echo "docs-check: $f failed"
			exit 1
		fi
	done
done
echo "docs-check: passed in $(($(date +%s) - start))s"

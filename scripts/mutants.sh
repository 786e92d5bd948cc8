#!/usr/bin/env bash
# mutants.sh: proof that the rule tests can fail. Each file in
# scripts/testdata/mutants/ is a one-line break of a rule, kept as a patch,
# with a header that names the packages whose tests must catch it:
#
#   pkgs: ./hub/placement          (go test package patterns)
#   run:  ^TestRule5               (optional -run regexp; default: all tests)
#   why:  CanHost ignores the region
#   --- a/hub/placement/machine.go
#   +++ b/hub/placement/machine.go
#   @@ ...
#
# For each mutant it copies the tree once, applies the patch, runs the named
# tests and reverts. A mutant that no longer applies is a failure, not a
# skip: the list must follow the code. It prints "mutants killed K/N" and
# exits 1 unless every mutant made a test fail.
#
# Usage: scripts/mutants.sh [NAME-GLOB]   (e.g. 'rule6*')
set -uo pipefail
cd "$(dirname "$0")/.."
dir=scripts/testdata/mutants
glob=${1:-*}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The tracked and untracked-but-not-ignored files, as CI would see them.
git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$tmp"

field() { sed -n "s/^$1:[[:space:]]*//p" "$2" | head -n1; }

total=0 killed=0
survived=()
for p in "$dir"/$glob.patch; do
	[ -e "$p" ] || continue
	name=$(basename "$p" .patch)
	total=$((total + 1))
	pkgs=$(field pkgs "$p")
	run=$(field run "$p")
	why=$(field why "$p")
	abs=$(cd "$(dirname "$p")" && pwd)/$(basename "$p")
	if [ -z "$pkgs" ]; then
		echo "FAIL   $name: no 'pkgs:' line"
		survived+=("$name (no pkgs line)")
		continue
	fi
	if ! (cd "$tmp" && git apply --check "$abs" 2>/dev/null); then
		echo "FAIL   $name: the patch no longer applies; update it to the code ($why)"
		survived+=("$name (does not apply)")
		continue
	fi
	(cd "$tmp" && git apply "$abs")
	args=(-count=1 -timeout 300s)
	[ -n "$run" ] && args+=(-run "$run")
	# shellcheck disable=SC2086 # pkgs is a list of patterns
	if out=$(cd "$tmp" && go test "${args[@]}" $pkgs 2>&1); then
		echo "ALIVE  $name: no test failed ($why)"
		survived+=("$name")
	else
		if grep -qE '^(FAIL|--- FAIL)' <<<"$out" && ! grep -q '\[build failed\]\|\[setup failed\]' <<<"$out"; then
			echo "killed $name ($why)"
			killed=$((killed + 1))
		else
			echo "FAIL   $name: the mutant does not build or set up; make it a running break ($why)"
			echo "$out" | tail -5 | sed 's/^/       /'
			survived+=("$name (does not build)")
		fi
	fi
	(cd "$tmp" && git apply -R "$abs")
done
echo "mutants killed $killed/$total"
if [ "$total" -eq 0 ]; then
	echo "no mutants found in $dir"
	exit 1
fi
if [ "$killed" -ne "$total" ]; then
	printf 'not killed: %s\n' "${survived[@]}"
	exit 1
fi

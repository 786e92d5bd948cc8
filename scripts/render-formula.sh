#!/usr/bin/env bash
# Renders the Homebrew formula with a release's url, version and sha256.
#   scripts/render-formula.sh URL VERSION [TARBALL] > einsora-agent.rb
# The sha256 is of TARBALL when given (a local copy of what URL serves),
# else of what URL serves now.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
	echo "usage: $0 URL VERSION [TARBALL]" >&2
	exit 2
fi
url=$1 version=${2#v} tarball=${3:-}
case $url in
https://*) ;;
*) echo "render-formula: URL must be https: $url" >&2; exit 2 ;;
esac
if ! [[ $version =~ ^[0-9A-Za-z.+-]+$ ]]; then
	echo "render-formula: bad VERSION $version" >&2
	exit 2
fi
sha() {
	if command -v sha256sum >/dev/null; then sha256sum | cut -d' ' -f1; else shasum -a 256 | cut -d' ' -f1; fi
}
if [ -n "$tarball" ]; then
	sum=$(sha <"$tarball")
else
	sum=$(curl -fsSL "$url" | sha)
fi
if ! [[ $sum =~ ^[0-9a-f]{64}$ ]]; then
	echo "render-formula: no sha256 for $url" >&2
	exit 1
fi
here=$(cd "$(dirname "$0")/.." && pwd)
# | cannot be in an https URL unescaped, so it delimits.
sed -e "s|@@URL@@|$url|" -e "s|@@VERSION@@|$version|" -e "s|@@SHA256@@|$sum|" "$here/packaging/homebrew/einsora-agent.rb"

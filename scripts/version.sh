#!/bin/sh
# Prints the version of this checkout in a form dpkg accepts: the tag
# without its "v" when HEAD is tagged vX.Y.Z and clean, the tag with
# +git<date>.<sha> when it is tagged but dirty, and 0.0.0~git<date>.<sha>
# otherwise ("~" sorts before any release). The date is the commit's, in
# UTC, so two builds of one commit agree.
set -eu
cd "$(dirname "$0")/.."
if ! sha=$(git rev-parse --short=7 HEAD 2>/dev/null); then
	echo "0.0.0~unknown"
	exit 0
fi
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d HEAD)
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=1
fi
tag=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null || true)
release=${tag#v}
# Only a tag dpkg takes as an upstream version counts as a release.
if [ -n "$tag" ] && printf '%s\n' "$release" | grep -Eq '^[0-9][0-9A-Za-z.+~]*$'; then
	if [ -z "$dirty" ]; then
		echo "$release"
	else
		echo "$release+git$date.$sha"
	fi
	exit 0
fi
echo "0.0.0~git$date.$sha"

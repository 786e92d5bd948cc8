#!/usr/bin/env bash
# Builds a release into dist/: scripts/release.sh VERSION (make release
# VERSION=x.y.z). Tarballs of both programs for linux and darwin on amd64
# and arm64 (darwin without cgo: the Homebrew formula builds the
# vz-capable agent on the Mac), the source tarball, the .debs of both
# programs for amd64 and arm64, the Homebrew formula rendered for the source
# tarball at BASE_URL (when set), and SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: release.sh VERSION}
version=${version#v}
if ! printf '%s\n' "$version" | grep -Eq '^[0-9][0-9A-Za-z.+~]*$'; then
	echo "release.sh: version $version: want x.y.z (a leading digit, then letters, digits and . + ~)" >&2
	exit 2
fi
GO=${GO:-go}
DIST=${DIST:-dist}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
rm -rf "$DIST"
mkdir -p "$DIST"

for os in linux darwin; do
	for arch in amd64 arm64; do
		name=einsora-edge_${version}_${os}_${arch}
		dir=bin/release/$name
		rm -rf "$dir"
		mkdir -p "$dir"
		for pkg in einsora-agent einsora-hub; do
			CGO_ENABLED=0 GOOS=$os GOARCH=$arch $GO build -trimpath \
				-ldflags "-s -w -X main.version=$version" -o "$dir/$pkg" ./cmd/$pkg
		done
		cp README.md "$dir/"
		# Same bytes from the same commit: fixed order, owner and times.
		tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
			-C bin/release -c "$name" | gzip -9n >"$DIST/$name.tar.gz"
	done
done

for arch in amd64 arm64; do
	scripts/build-deb.sh "$version" "$arch" "$DIST"
done

# The source, which the Homebrew formula builds on the Mac (vz needs cgo
# and the entitlement there).
src=einsora-edge-$version.tar.gz
git archive --format=tar --prefix="einsora-edge-$version/" HEAD | gzip -9n >"$DIST/$src"
if [ -n "${BASE_URL:-}" ]; then
	# make formula writes dist/einsora-agent.rb.
	make formula URL="${BASE_URL%/}/$src" VERSION="$version" TARBALL="$DIST/$src"
	[ "$DIST" = dist ] || mv dist/einsora-agent.rb "$DIST/"
else
	echo "release.sh: BASE_URL unset: the Homebrew formula is not rendered (make release VERSION=$version BASE_URL=https://…)" >&2
fi

(cd "$DIST" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs sha256sum >SHA256SUMS)
echo "release $version in $DIST:"
ls -l "$DIST"

#!/usr/bin/env bash
# Builds the .debs of both programs: scripts/build-deb.sh VERSION ARCH OUTDIR
# (ARCH amd64 or arm64). Each binary is static and stripped; its man pages
# and completions come from its own cobra commands (the hidden gen-docs),
# run from a build for this machine so a cross build works too.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: build-deb.sh VERSION ARCH OUTDIR}
arch=${2:?usage: build-deb.sh VERSION ARCH OUTDIR}
out=${3:?usage: build-deb.sh VERSION ARCH OUTDIR}
GO=${GO:-go}
NFPM=${NFPM:-github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2}
version=${version#v}
case $version in
[0-9]*) ;;
*) echo "build-deb.sh: version $version does not start with a digit, which dpkg refuses" >&2; exit 2 ;;
esac

# The commit's time, so man pages and the changelog of one commit agree.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH=$epoch
mkdir -p "$out"
for pkg in einsora-agent einsora-hub; do
	stage=bin/deb/stage/$pkg
	rm -rf "$stage"
	mkdir -p "$stage"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch $GO build -trimpath \
		-ldflags "-s -w -X main.version=$version" -o "$stage/$pkg" ./cmd/$pkg
	CGO_ENABLED=0 $GO build -trimpath -ldflags "-X main.version=$version" -o bin/deb/host/$pkg ./cmd/$pkg
	bin/deb/host/$pkg gen-docs "$stage"
	gzip -9n "$stage"/man1/*.1
	date=$(date -u -R -d "@$epoch")
	{
		printf '%s (%s) unstable; urgency=medium\n\n' "$pkg" "$version"
		printf '  * Build %s of einsora edge.\n\n' "$version"
		printf ' -- Einsora <maintainers@einsora.dev>  %s\n' "$date"
	} | gzip -9n >"$stage/changelog.gz"
	ARCH=$arch VERSION=$version $GO run "$NFPM" pkg --config packaging/deb/$pkg/nfpm.yaml \
		--packager deb --target "$out/"
done

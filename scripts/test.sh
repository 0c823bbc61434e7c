#!/usr/bin/env bash
# The project's whole test run: formatting, vet, staticcheck, the race-enabled
# tests, the conformance vectors through the sluice command, the benchmark module's
# tests and a one-shot run of its benchmarks, and the deploy module's tests (the
# image, the Helm chart, the manifests). `make test` and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2 # 2026.2.2, the first to know Go 1.26
DYNALITE_VERSION=4.0.0      # the DynamoDB-compatible server of dynamostore's tests
BIN="$PWD/.bin"
export PATH="$BIN:$PATH"

step() { printf '\n== %s\n' "$*"; }

step gofmt
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "not gofmt'ed:"; echo "$unformatted"; exit 1
fi

step go vet
go vet ./...
(cd bench && go vet ./...)
(cd deploy && go vet ./...)

step staticcheck "$STATICCHECK_VERSION"
if ! staticcheck -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
	GOBIN="$BIN" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
staticcheck ./...
(cd bench && staticcheck ./...)
(cd deploy && staticcheck ./...)

step test servers
# internal/testserver starts throwaway Redis, PostgreSQL and MariaDB servers
# (and dynalite, installed below) for the store tests; without them those tests skip, or fail under CI=true.
# The same holds for rsvg-convert and Chromium, which render the simulator's
# charts and the server's page, and for podman, which builds and runs the
# image in deploy's test (runc: where crun cannot start a container, as in
# a sandbox with cgroups in hybrid mode, runc can).
# has looks for a binary where testserver does: PATH, the sbin directories
# and /usr/lib/postgresql/*/bin.
has() {
	local d IFS=:
	for d in $PATH:/usr/local/sbin:/usr/sbin:/sbin; do
		[ -n "$d" ] && [ -f "$d/$1" ] && [ -x "$d/$1" ] && return 0
	done
	for d in /usr/lib/postgresql/*/bin; do
		[ -f "$d/$1" ] && [ -x "$d/$1" ] && return 0
	done
	return 1
}
missing_packages() { # the Debian packages of the binaries not found
	has redis-server || echo redis-server
	{ has initdb && has postgres; } || echo postgresql
	{ has mariadbd && has mariadb-install-db; } || echo mariadb-server
	has mariadb || echo mariadb-client
	has node || echo nodejs # runs dynalite, installed below with npm
	has npm || echo npm
	has rsvg-convert || echo librsvg2-bin # renders simulate's SVG charts in a test
	has chromium || echo chromium         # loads the server's live page in a test
	has podman || echo podman             # builds and runs the container image in a test
	has runc || echo runc
}
mapfile -t missing < <(missing_packages)
if [ ${#missing[@]} -eq 0 ]; then
	echo "all installed"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "installing ${missing[*]}"
	aptlog=$(mktemp)
	if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$aptlog" 2>&1; then
		cat "$aptlog"; rm -f "$aptlog"
		echo "apt-get install ${missing[*]} failed; see its output above"; exit 1
	fi
	rm -f "$aptlog"
	mapfile -t still < <(missing_packages)
	if [ ${#still[@]} -gt 0 ]; then
		echo "installed ${missing[*]}, but the binaries of ${still[*]} are still not found"; exit 1
	fi
elif [ "${CI:-}" = true ]; then
	echo "CI=true but these Debian packages are missing and cannot be installed"
	echo "without root and apt-get: ${missing[*]}"; exit 1
else
	echo "not installed: ${missing[*]}; the tests that need them will skip"
fi
# Postgres refuses to run as root, so as root testserver runs it as the
# user postgres, which the Debian package creates.
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
	echo "creating the system user postgres"
	useradd --system --user-group --no-create-home --shell /usr/sbin/nologin postgres
fi

step dynalite "$DYNALITE_VERSION"
# dynamostore's tests run against dynalite, an npm package that
# internal/testserver finds in .bin/dynalite (git-ignored).
dynalite_pkg="$BIN/dynalite/node_modules/dynalite/package.json"
if [ -f "$dynalite_pkg" ] && grep -q "\"version\": \"$DYNALITE_VERSION\"" "$dynalite_pkg"; then
	echo "installed"
elif command -v npm >/dev/null; then
	npmlog=$(mktemp)
	if ! npm install --prefix "$BIN/dynalite" --no-audit --no-fund "dynalite@$DYNALITE_VERSION" >"$npmlog" 2>&1; then
		cat "$npmlog"; rm -f "$npmlog"
		echo "npm install dynalite@$DYNALITE_VERSION failed; see its output above"; exit 1
	fi
	rm -f "$npmlog"
	echo "installed into $BIN/dynalite"
elif [ "${CI:-}" = true ]; then
	echo "CI=true but npm is missing: cannot install dynalite"; exit 1
else
	echo "npm not found; the DynamoDB tests will skip"
fi

step go test -race
go test -race -count=1 ./...

step benchmark module: its tests, then every benchmark once
# The tests hold the peers to the same limits as sluice (TestEquivalentConfigs)
# and check the load generator's reading of replies.
(cd bench && go test -count=1 ./...)
(cd bench && go test -run '^$' -bench . -benchtime 1x ./... >/dev/null)
echo ok

step "deploy module: the image, the Helm chart, the manifests, the examples"
# Helm is deploy/go.mod's tool, built at its pinned version on first use.
(cd deploy && go test -count=1 ./...)

step conformance vectors
vectors=(conformance/vectors)
if [ -d ../shared/conformance/examples ]; then
	vectors+=(../shared/conformance/examples)
elif [ "${CI:-}" = true ]; then
	echo "CI=true but ../shared/conformance/examples is missing"; exit 1
fi
go run ./cmd/sluice conformance "${vectors[@]}"

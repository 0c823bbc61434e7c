#!/usr/bin/env bash
# The project's whole test run: formatting, vet, staticcheck, the race-enabled
# tests, the conformance vectors through the sluice command, and a one-shot
# run of the benchmark module. `make test` and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2 # 2026.2.2, the first to know Go 1.26
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

step staticcheck "$STATICCHECK_VERSION"
if ! staticcheck -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
	GOBIN="$BIN" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
staticcheck ./...
(cd bench && staticcheck ./...)

step go test -race
go test -race -count=1 ./...

step benchmarks compile and run once
(cd bench && go test -run '^$' -bench . -benchtime 1x ./... >/dev/null)
echo ok

step conformance vectors
vectors=(testdata/vectors)
if [ -d ../shared/conformance/examples ]; then
	vectors+=(../shared/conformance/examples)
elif [ "${CI:-}" = true ]; then
	echo "CI=true but ../shared/conformance/examples is missing"; exit 1
fi
go run ./cmd/sluice conformance "${vectors[@]}"

.PHONY: test check demo bench image manifests

# Everything CI runs: gofmt, vet, staticcheck, go test -race, the vectors,
# the benchmark and deploy modules' tests.
test:
	./scripts/test.sh

demo:
	go run ./cmd/sluice demo

# Side-by-side benchmarks against peer libraries; see docs/benchmarks.md.
bench:
	cd bench && go test -run '^$$' -bench . -benchmem -count 6 | tee bench.txt

# The container image, built offline with podman (docs/deploy.md,
# "Container image"); it prints the image's tag, ID and size.
image:
	deploy/image/build.sh

# deploy/kubernetes/sluice.yaml from the Helm chart (docs/kubernetes.md).
manifests:
	cd deploy && go test -count=1 -run '^TestManifests$$' -update .

# A fast check for contributors: gofmt, and the tests of both modules that
# need no server (go test -short skips those that start Redis, PostgreSQL,
# MariaDB, dynalite, Chromium or the image), with results cached between
# runs. Uncached, 48 s on a shared 2-CPU machine at a load average of 12;
# -p 8 overlaps the packages that wait on timers. make test, which CI runs,
# still runs everything.
check:
	@test -z "$$(gofmt -l .)" || { echo "not gofmt'ed:"; gofmt -l .; exit 1; }
	go test -short -p 8 ./...
	cd deploy && go test -short ./...

.PHONY: test demo bench

# Everything CI runs: gofmt, vet, staticcheck, go test -race, the vectors.
test:
	./scripts/test.sh

demo:
	go run ./cmd/sluice demo

# Side-by-side benchmarks against peer libraries; see docs/benchmarks.md.
bench:
	cd bench && go test -run '^$$' -bench . -benchmem -count 6 | tee bench.txt

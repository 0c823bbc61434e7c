#!/usr/bin/env bash
# sizing.sh: what sluice serve costs per 10,000 decisions a second, on the
# in-memory store and on Redis, for docs/kubernetes.md ("Sizing"). It runs
# sluice serve as the image does (GOGC at sluice's default, one process),
# drives Envoy's gRPC API with bench/cmd/rlsload over 1000 keys, and reads
# the CPU time of sluice (and of Redis) from /proc around each run, and
# sluice's peak resident memory. Loopback only; each run lasts DURATION.
#
#   deploy/sizing.sh          # DURATION=10s CONNS="8 64" by default
#
# Needs redis-server; it starts its own on a free port and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-8 64}

source scripts/loadlib.sh

CGO_ENABLED=0 go build -trimpath -o "$tmp/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/rlsload" ./cmd/rlsload)

start_redis

echo "machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); $(go version)"
printf '%-6s %5s %12s %16s %18s %14s %14s\n' store conns decisions/s "sluice µs/dec" "cores per 10k/s" "redis µs/dec" "peak RSS MiB"
for store in mem "redis://127.0.0.1:$redis_port/0"; do
	[ "$store" = mem ] && url=mem:// || url=$store
	for c in $CONNS; do
		http=$(free_port) grpc=$(free_port)
		sluice_config "$url" >"$tmp/sluice.yaml"
		"$tmp/sluice" serve --config "$tmp/sluice.yaml" --http "127.0.0.1:$http" --grpc "127.0.0.1:$grpc" >"$tmp/sluice.log" 2>&1 &
		pid=$!
		pids+=($pid)
		wait_port "$grpc"
		s0=$(cpu_ticks "$pid") r0=$(cpu_ticks "$redis_pid")
		out=$("$tmp/rlsload" -addr "127.0.0.1:$grpc" -c "$c" -d "$DURATION")
		s1=$(cpu_ticks "$pid") r1=$(cpu_ticks "$redis_pid")
		rss=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		n=$(sed -n 's/^requests \([0-9]*\) .*/\1/p' <<<"$out")
		rate=$(sed -n 's/^decisions\/s \([0-9]*\) .*/\1/p' <<<"$out")
		grep -q 'errors 0)' <<<"$out" || { echo "$out"; echo "sizing.sh: the run had errors"; exit 1; }
		awk -v store="${store%%:*}" -v c="$c" -v rate="$rate" -v n="$n" -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v hz="$hz" -v rss="$rss" 'BEGIN {
			us = s / hz * 1e6 / n; rus = r / hz * 1e6 / n
			printf "%-6s %5d %12d %16.1f %18.2f %14.1f %14d\n", store, c, rate, us, us / 100, (store == "mem" ? 0 : rus), rss
		}'
	done
done

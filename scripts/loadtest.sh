#!/usr/bin/env bash
# loadtest.sh: decisions per second and latency of sluice serve, over its
# HTTP JSON API (wrk) and Envoy's gRPC API (bench/cmd/rlsload), in memory
# and on Redis, next to envoyproxy/ratelimit on the same Redis and the same
# gRPC load. Loopback only; each run is bounded by DURATION. The figures go
# to docs/benchmarks.md by hand, with the machine they came from.
#
#   scripts/loadtest.sh            # DURATION=10s CONNS=64 PAIRS=1 PIN=0 by default
#
# PIN=1 keeps the server under test off the load generator's CPU: Redis
# and the load generators run on CPU 0 (taskset), the servers on the
# others. On envoyproxy/ratelimit's config, each run also prints the
# server's own CPU time per decision, read from /proc.
#
# Needs wrk and redis-server (Debian: wrk, redis-server). envoyproxy/ratelimit
# is built from the Go module proxy into a temp dir unless RATELIMIT_BIN
# names a binary; it is never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
PAIRS=${PAIRS:-1}
PIN=${PIN:-0}
[[ $PAIRS =~ ^[1-9][0-9]*$ ]] || { echo "PAIRS=$PAIRS: want a positive whole number"; exit 1; }
[[ $PIN =~ ^[01]$ ]] || { echo "PIN=$PIN: want 0 or 1"; exit 1; }
# load and server prefix the commands of the load side (Redis, the load
# generators) and of the servers under test.
load=() server=()
if [ "$PIN" = 1 ]; then
	cpus=$(nproc)
	[ "$cpus" -ge 2 ] || { echo "PIN=1 needs at least 2 CPUs, this machine has $cpus"; exit 1; }
	load=(taskset -c 0) server=(taskset -c "1-$((cpus - 1))")
fi
RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}

source scripts/loadlib.sh

go build -o "$tmp/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/rlsload" ./cmd/rlsload)
if [ -z "${RATELIMIT_BIN:-}" ]; then
	GOBIN="$tmp" GOFLAGS=-mod=mod go install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION"
	RATELIMIT_BIN="$tmp/service_cmd"
fi

start_redis "${load[@]}"

run_sluice() { # name store-url
	local http grpc
	http=$(free_port) grpc=$(free_port)
	sluice_config "$2" >"$tmp/$1.yaml"
	"${server[@]}" "$tmp/sluice" serve --config "$tmp/$1.yaml" --http "127.0.0.1:$http" --grpc "127.0.0.1:$grpc" >"$tmp/$1.log" 2>&1 &
	local pid=$!
	pids+=($pid)
	wait_port "$http"
	wait_port "$grpc"
	echo "== sluice serve, $1, HTTP JSON (wrk -t2 -c$CONNS -d$DURATION)"
	"${load[@]}" wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s bench/load/consume.lua "http://127.0.0.1:$http" |
		grep -E 'Requests/sec|^ +(50|99)%|Non-2xx|Socket errors'
	echo "== sluice serve, $1, gRPC ShouldRateLimit (rlsload -c $CONNS -d $DURATION)"
	"${load[@]}" "$tmp/rlsload" -addr "127.0.0.1:$grpc" -c "$CONNS" -d "$DURATION"
	kill "$pid"
}

run_sluice memory mem://
run_sluice redis "redis://127.0.0.1:$redis_port/0"

# envoyproxy/ratelimit's config, served by both: sluice as a drop-in
# (docs/envoy.md) and envoyproxy/ratelimit, on the same Redis, loaded in
# turn PAIRS times. The machine's speed may drift between runs, so the
# ratio of each pair, measured back to back, is steadier than a ratio of
# separate runs' figures; the script ends with every pair's and their median.
mkdir -p "$tmp/rl/ratelimit/config"
cat >"$tmp/rl/ratelimit/config/load.yaml" <<YAML
domain: load
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 100}
YAML
dropin_grpc=$(free_port) dropin_http=$(free_port)
printf 'store: redis://127.0.0.1:%s/0\nratelimit: {runtime_root: %s, runtime_subdirectory: ratelimit, runtime_watch_root: false}\n' \
	"$redis_port" "$tmp/rl" >"$tmp/dropin.yaml"
"${server[@]}" "$tmp/sluice" serve --config "$tmp/dropin.yaml" --http "127.0.0.1:$dropin_http" --grpc "127.0.0.1:$dropin_grpc" >"$tmp/dropin.log" 2>&1 &
dropin_pid=$!
pids+=($dropin_pid)
wait_port "$dropin_grpc"

rl_grpc=$(free_port) rl_http=$(free_port) rl_debug=$(free_port)
env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
	RUNTIME_ROOT="$tmp/rl" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	GRPC_HOST=127.0.0.1 GRPC_PORT="$rl_grpc" HOST=127.0.0.1 PORT="$rl_http" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$rl_debug" \
	"${server[@]}" "$RATELIMIT_BIN" >"$tmp/ratelimit.log" 2>&1 &
rl_pid=$!
pids+=($rl_pid)
wait_port "$rl_grpc"

decisions() { sed -n 's/^decisions\/s \([0-9]*\) .*/\1/p'; }
# load_server runs the gRPC load on the server at pid and port, prints
# rlsload's report and the server's CPU time per decision, and sets
# $rate to the decisions per second and $cpu to those µs.
load_server() { # pid port [rlsload flags]
	local t0 t1 out requests
	t0=$(cpu_ticks "$1")
	out=$("${load[@]}" "$tmp/rlsload" -addr "127.0.0.1:$2" -c "$CONNS" -d "$DURATION" "${@:3}")
	t1=$(cpu_ticks "$1")
	echo "$out"
	requests=$(sed -n 's/^requests \([0-9]*\) .*/\1/p' <<<"$out")
	rate=$(decisions <<<"$out")
	cpu=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
	echo "server CPU per decision ${cpu} µs"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratios=() cpus=()
for pair in $(seq "$PAIRS"); do
	echo "== sluice serve, redis, envoyproxy/ratelimit's config files, gRPC ShouldRateLimit (rlsload -c $CONNS -d $DURATION; pair $pair of $PAIRS)"
	load_server "$dropin_pid" "$dropin_grpc"
	ours=$rate ours_cpu=$cpu
	echo "== envoyproxy/ratelimit $RATELIMIT_VERSION, redis, gRPC ShouldRateLimit (rlsload -c $CONNS -d $DURATION; pair $pair of $PAIRS)"
	load_server "$rl_pid" "$rl_grpc"
	ratios+=("$(awk -v a="$ours" -v b="$rate" 'BEGIN { printf "%.2f", a / b }')")
	cpus+=("$(awk -v a="$ours_cpu" -v b="$cpu" 'BEGIN { printf "%.2f", b / a }')")
done
# One hot descriptor (a route's generic_key, say): every call on one key,
# mostly over its limit of 100 a second.
echo "== sluice serve, redis, envoyproxy/ratelimit's config files, one hot descriptor (rlsload -keys 1 -c $CONNS -d $DURATION)"
load_server "$dropin_pid" "$dropin_grpc" -keys 1
echo "== envoyproxy/ratelimit $RATELIMIT_VERSION, redis, one hot descriptor (rlsload -keys 1 -c $CONNS -d $DURATION)"
load_server "$rl_pid" "$rl_grpc" -keys 1
echo "== sluice's decisions/s over envoyproxy/ratelimit's, pair by pair: ${ratios[*]}; median $(printf '%s\n' "${ratios[@]}" | median)"
echo "== envoyproxy/ratelimit's server CPU per decision over sluice's, pair by pair: ${cpus[*]}; median $(printf '%s\n' "${cpus[@]}" | median)"

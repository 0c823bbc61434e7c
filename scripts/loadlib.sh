# loadlib.sh: what scripts/loadtest.sh and deploy/sizing.sh share, sourced
# by both from the repository's root: a temp dir and the processes started,
# removed and killed on exit; free loopback ports; a process's CPU time; a
# throwaway Redis; and the config of the limiter they load.

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened"; exit 1; }

# cpu_ticks is a process's user and system CPU time, in clock ticks, hz
# a second.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# start_redis starts redis-server on a free port, without persistence,
# its command prefixed by the arguments (taskset -c 0, say), and sets
# redis_port and redis_pid once it listens.
start_redis() {
	redis_port=$(free_port)
	"$@" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	pids+=($redis_pid)
	wait_port "$redis_port"
}

# sluice_config is the config of sluice serve on the store URL $1: 100
# decisions a second per key, which rlsload spreads over 1000 keys, so
# that the load is decided, not mostly refused.
sluice_config() {
	cat <<YAML
store: $1
limiters:
  load: {policy: fixed_window, limit: 100, interval: 1s}
envoy:
  - domain: load
    descriptors:
      - key: client
        limiter: load
YAML
}

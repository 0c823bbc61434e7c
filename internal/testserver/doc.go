// Package testserver starts throwaway database servers for tests: Redis,
// a three-master Redis Cluster (with or without a replica of each
// master), PostgreSQL, MariaDB and dynalite (a DynamoDB-compatible
// server). Each runs as a child process of the test binary, on a free
// 127.0.0.1 port, with its data or log in a fresh temporary directory,
// and never touches a server already running on the standard ports.
//
// There are three ways to get a server:
//
//   - [Redis], [RedisCluster], [RedisClusterWithReplicas], [Postgres],
//     [MariaDB] and [Dynamo] start a fresh server for one test and stop
//     it in t.Cleanup. Use them for a test that needs a server of its
//     own, for example to stop it or to kill a cluster's master.
//
//   - [SharedRedis], [SharedRedisCluster], [SharedPostgres],
//     [SharedMariaDB] and [SharedDynamo] start one server per test binary
//     on first use and hand the same one to every later caller; [Main]
//     stops them.
//
//   - [StartRedis], [StartRedisCluster], [StartRedisClusterWithReplicas],
//     [StartPostgres], [StartMariaDB] and [StartDynamo] take a context
//     instead of a testing.TB and return a stop function, for callers
//     that manage the lifetime themselves.
//
// [SecureRedis], [SecureRedisCluster] and [SecureRedisSentinel] (and
// their Start… forms) start Redis servers secured as a [Secure] says:
// TLS only, with client certificates, made by [NewCerts] with a CA of the
// test's own; a password for the default user; ACL users.
//
// [NewOTLP] is not a child process: an OpenTelemetry receiver of traces
// over OTLP/gRPC, in the test's process, that keeps the spans it gets.
//
// A test that wants a go-redis client of the shared Redis gets it from
// the subpackage testredis.
//
// A package that shares servers runs its tests through Main:
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }
//
// The servers are found in PATH and in the Debian locations (/usr/sbin,
// /usr/lib/postgresql/*/bin); dynalite, an npm package, also in the
// .bin/dynalite of the checkout, where scripts/test.sh installs it. When
// one is missing, Start… returns a [*MissingError] and the testing.TB
// helpers skip the test, or fail it if the environment variable CI is
// "true". Installing the servers is the job
// of scripts/test.sh, not of this package.
//
// Start-up is bounded by one minute, and an error includes the end of the
// server's log. Stopping kills the server (Postgres gets an immediate
// shutdown), waits for it to exit and removes its directory; the data is
// not meant to survive. If the test binary dies without stopping them, the
// kernel signals the servers as their parent exits (Linux's parent-death
// signal), though their directories stay behind.
//
// Servers run as the current user, except that Postgres refuses to run as
// root: as root, initdb and postgres run as the system user "postgres",
// which the Debian package postgresql creates.
package testserver

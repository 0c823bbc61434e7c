package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testserver"
)

func TestMain(m *testing.M) {
	if IsWorker() { // this test binary stands in for sluice as a check-store writer
		err := Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(ExitCode(err))
	}
	os.Exit(testserver.Main(m))
}

// storeURLs are the URLs of every kind of store, on throwaway servers.
func storeURLs(t *testing.T) map[string]string {
	mysqlDSN := testserver.SharedMariaDB(t) // root@tcp(127.0.0.1:PORT)/sluice
	hostPort := strings.TrimSuffix(strings.TrimPrefix(mysqlDSN, "root@tcp("), ")/sluice")
	return map[string]string{
		"mem":            "mem://",
		"redis":          testserver.SharedRedis(t),
		"redis+cluster":  "redis+cluster://" + strings.Join(testserver.SharedRedisCluster(t), ","),
		"redis+sentinel": testserver.SharedRedisSentinel(t),
		"postgres":       testserver.SharedPostgres(t),
		"postgres-sfu":   addQuery(testserver.SharedPostgres(t), "strategy=select_for_update&table=sluice_sfu"),
		"postgres-lock":  addQuery(testserver.SharedPostgres(t), "strategy=advisory_lock&table=sluice_lock"),
		"mysql":          "mysql://root@" + hostPort + "/sluice",
	}
}

func addQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

// TestCheckStore runs check-store, with writer processes, on every store.
func TestCheckStore(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			processes := "2"
			if name == "mem" {
				processes = "0" // each process has its own memory
			}
			out, _, err := runCLI(t, "check-store", "--writers", "8", "--processes", processes, "--increments", "20", url)
			if err != nil || !strings.HasPrefix(lastLine(out), "SAFE: ") {
				t.Errorf("check-store %s = %v\n%s", url, err, out)
			}
		})
	}
}

// TestConformanceStore runs the repository's vectors through
// `sluice conformance --store` on every store.
func TestConformanceStore(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			out, _, err := runCLI(t, "conformance", "--store", url, "../../conformance/vectors")
			last := lastLine(out)
			if err != nil || !strings.Contains(last, " 0 failed") || strings.HasPrefix(last, "0 passed") {
				t.Errorf("conformance --store %s = %v\n%s", url, err, out)
			}
		})
	}
}

func TestCheckStoreBadURL(t *testing.T) {
	_, _, err := runCLI(t, "check-store", "ftp://nowhere")
	if err == nil || !strings.Contains(err.Error(), `unknown scheme "ftp"`) {
		t.Errorf("check-store ftp:// = %v, want an unknown scheme error", err)
	}
}

// TestCheckStoreCatchesUnsharedStore runs writer processes on mem://,
// which each have a store of their own: the check must say not safe.
func TestCheckStoreCatchesUnsharedStore(t *testing.T) {
	out, _, err := runCLI(t, "check-store", "--writers", "2", "--processes", "2", "--increments", "10", "mem://")
	if err == nil || !strings.HasPrefix(lastLine(out), "NOT SAFE: ") || !strings.Contains(out, "counter is 20 after 40 increments") {
		t.Errorf("check-store mem:// with processes = %v\n%s", err, out)
	}
}

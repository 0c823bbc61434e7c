package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/sluicehq/sluice/internal/app/server"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[--config FILE] [--http ADDR] [--grpc ADDR] [--log-format text|json]",
		"Serve runs the rate-limit server: an HTTP JSON API under /api/v1/, Envoy's rate limit\n"+
			"service on gRPC, Prometheus metrics at /metrics, health at /healthz and /readyz, and a\n"+
			"live page at /. Without --config it runs a built-in example on the in-memory store.\n"+
			"The config file is reloaded on SIGHUP and when it changes; SIGINT and SIGTERM drain\n"+
			"requests in flight and stop. docs/deploy.md describes the config file.", stderr)
	configPath := fs.String("config", "", "the config `file`; the built-in example when empty")
	httpAddr := fs.String("http", "", "HTTP listen `address`, e.g. 127.0.0.1:0 (default: the config's server.http, else "+server.DefaultHTTP+")")
	grpcAddr := fs.String("grpc", "", "gRPC listen `address`, or off (default: the config's server.grpc, else "+server.DefaultGRPC+")")
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fs.usagef("unexpected arguments %q", fs.Args())
	}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, nil))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	default:
		return fs.usagef("--log-format %q: want text or json", *logFormat)
	}
	routeLogs(log)
	tuneGC()

	var cfg *server.Config
	var err error
	var opts []server.Option
	if *configPath == "" {
		cfg, err = server.DefaultConfig()
	} else {
		cfg, err = server.LoadConfigFile(*configPath)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		opts = append(opts, server.WithConfigFile(*configPath, hup))
	}
	if err != nil {
		return err
	}
	limitMemory(cfg, log)
	httpAt := pick(*httpAddr, cfg.HTTP, server.DefaultHTTP)
	opts = append(opts, server.WithLogger(log), server.WithHTTPAddress(httpAt))
	srv, err := server.New(ctx, cfg, opts...)
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", httpAt)
	if err != nil {
		srv.Close()
		return err
	}
	var grpcLn net.Listener
	if addr := pick(*grpcAddr, cfg.GRPC, server.DefaultGRPC); addr != "off" {
		if grpcLn, err = net.Listen("tcp", addr); err != nil {
			httpLn.Close()
			srv.Close()
			return err
		}
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "sluice serve: HTTP on %s://%s\n", scheme, httpLn.Addr())
	if grpcLn != nil {
		fmt.Fprintf(stdout, "sluice serve: gRPC on %s\n", grpcLn.Addr())
	}
	if err := srv.Serve(ctx, httpLn, grpcLn); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "sluice serve: stopped")
	return nil
}

// pick returns the first of values that is not empty.
func pick(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// serveGCPercent is the server's GOGC unless the environment sets one. A
// decision allocates (gRPC alone takes dozens of small objects per call)
// and keeps little, so the live heap is small and the collector, at the
// default 100, ran often enough to cost about a tenth of the server's CPU
// under load, and to shrink the stacks of goroutines that grow them
// back on the next call. At 400 the heap may grow to five times what is
// live instead of twice; docs/benchmarks.md has the measurement. The
// memory limit (limitMemory) bounds that growth once the keys are many:
// a million keys took 619 MiB resident at 400 without it.
const serveGCPercent = 400

func tuneGC() {
	// Go reads an empty GOGC as unset, and so does the server.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}

// limitMemory sets the Go memory limit to cfg's MemoryLimit unless the
// environment sets GOMEMLIMIT (an empty one counts as unset, as Go reads
// it), so that the heap GOGC=400 lets grow stays within what
// docs/deploy.md says the settings need. The limit is soft: past it the
// collector runs more often, up to half the CPU, rather than fail.
func limitMemory(cfg *server.Config, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := cfg.MemoryLimit()
	debug.SetMemoryLimit(limit)
	log.Info("Go memory limit set from server.limits.max_keys; set GOMEMLIMIT to choose another",
		"GOMEMLIMIT", strconv.FormatInt(limit>>20, 10)+"MiB", "max_keys", cfg.MaxKeys)
}

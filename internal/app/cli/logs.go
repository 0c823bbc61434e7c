package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/grpclog"
)

// routeLogs sends what the libraries of the server log on their own
// through log, so that every line on stderr has the --log-format asked
// for: go-redis (dial failures, Sentinel's choice of master), the MySQL
// driver (broken connections), gRPC, and anything written with the
// standard log package. pgx logs nothing unless given a tracer. Each
// library keeps its logger in a global, so the last call wins; the
// command calls it before it opens the store or starts gRPC.
func routeLogs(log *slog.Logger) {
	routed.Store(log)
	routeOnce.Do(func() {
		// gRPC's setter is not safe while gRPC runs, so the globals are set
		// once, to adapters that read routed.
		slog.SetDefault(slog.New(routedHandler{})) // the standard log package too
		redis.SetLogger(redisLogger{})
		_ = mysql.SetLogger(mysqlLogger{}) // fails only for a nil logger
		grpclog.SetLoggerV2(grpcLogger{})
	})
}

var (
	routed    atomic.Pointer[slog.Logger]
	routeOnce sync.Once
)

// routedHandler is the handler of the logger routeLogs was given last.
type routedHandler struct{}

func (routedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return routed.Load().Handler().Enabled(ctx, level)
}
func (routedHandler) Handle(ctx context.Context, r slog.Record) error {
	return routed.Load().Handler().Handle(ctx, r)
}
func (h routedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return routed.Load().Handler().WithAttrs(attrs)
}
func (h routedHandler) WithGroup(name string) slog.Handler {
	return routed.Load().Handler().WithGroup(name)
}

// redisLogger is go-redis's Logging interface on slog. go-redis logs
// trouble (a failed dial, a connection with unread data) and Sentinel's
// changes of master, so its lines are warnings.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	routed.Load().WarnContext(ctx, fmt.Sprintf(format, v...), "lib", "go-redis")
}

// mysqlLogger is the MySQL driver's Logger on slog. The driver logs
// connections it found broken.
type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) {
	routed.Load().Warn(fmt.Sprint(v...), "lib", "mysql")
}

// grpcLogger is gRPC's LoggerV2 on slog. gRPC's info lines (each
// connection's state) go out at the debug level, which the command's
// handlers leave out, as gRPC's own default logger does.
type grpcLogger struct{}

func (l grpcLogger) Info(args ...any)   { l.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (l grpcLogger) Infoln(args ...any) { l.emit(slog.LevelDebug, fmt.Sprint(args...)) }
func (l grpcLogger) Infof(format string, args ...any) {
	l.emit(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (l grpcLogger) Warning(args ...any)   { l.emit(slog.LevelWarn, fmt.Sprint(args...)) }
func (l grpcLogger) Warningln(args ...any) { l.emit(slog.LevelWarn, fmt.Sprint(args...)) }
func (l grpcLogger) Warningf(format string, args ...any) {
	l.emit(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (l grpcLogger) Error(args ...any)   { l.emit(slog.LevelError, fmt.Sprint(args...)) }
func (l grpcLogger) Errorln(args ...any) { l.emit(slog.LevelError, fmt.Sprint(args...)) }
func (l grpcLogger) Errorf(format string, args ...any) {
	l.emit(slog.LevelError, fmt.Sprintf(format, args...))
}

// Fatal logs and exits, as grpclog.LoggerV2 requires.
func (l grpcLogger) Fatal(args ...any)                 { l.fatal(fmt.Sprint(args...)) }
func (l grpcLogger) Fatalln(args ...any)               { l.fatal(fmt.Sprint(args...)) }
func (l grpcLogger) Fatalf(format string, args ...any) { l.fatal(fmt.Sprintf(format, args...)) }

// V reports whether verbosity level v is on: only level 0, as in gRPC's
// default logger.
func (l grpcLogger) V(v int) bool { return v <= 0 }

func (l grpcLogger) emit(level slog.Level, msg string) {
	routed.Load().Log(context.Background(), level, msg, "lib", "grpc")
}

func (l grpcLogger) fatal(msg string) {
	l.emit(slog.LevelError, msg)
	os.Exit(1)
}

package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/sluicetest"
)

func ExampleInterceptor() {
	clock := sluicetest.NewFakeClock(1_700_000_000 * int64(time.Second)) // for a reproducible output
	perKey, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithClock(clock))
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New([]grpclimit.Limit{
		{Name: "per-key", Limiter: perKey, Key: grpclimit.Metadata("x-api-key")},
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary), grpc.ChainStreamInterceptor(limit.Stream))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 20) // in memory; a net.Listener on a port works the same
	go srv.Serve(lis)
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for range 3 {
		clock.Advance(10 * time.Second)
		var trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
		if err == nil {
			fmt.Println("OK")
			continue
		}
		st := status.Convert(err)
		fmt.Println(st.Code(), st.Message())
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("RetryInfo:", ri.GetRetryDelay().AsDuration())
			}
		}
		if v := trailer.Get("grpc-retry-pushback-ms"); v != nil {
			fmt.Println("grpc-retry-pushback-ms:", v[0], "retry-after:", trailer.Get("retry-after")[0])
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted rate limit "per-key" exceeded, retry after 40s
	// RetryInfo: 40s
	// grpc-retry-pushback-ms: 40000 retry-after: 40
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wGRPC is the gRPC unary workload: a grpc-go client calling
// orders.v1.Orders/Create on e2e/bench/grpcupstream directly, and through
// idemgate (Valkey store, h2c on its listener and to the backend) without
// a key, with a fresh key per call and with keys already completed, in one
// run (docs/grpc.md).
const wGRPC = "grpc"

// grpcMethod is the method every call of the workload invokes.
const grpcMethod = "/orders.v1.Orders/Create"

// grpcRow is one phase of the gRPC workload.
type grpcRow struct {
	mode string // direct, passthrough, fresh, replay
	row  *row
}

// runGRPC measures the gRPC workload: closed loop at o.concurrency calls in
// flight over 4 client connections, o.duration per phase.
func runGRPC(ctx context.Context, o options, ps *procs, root, idemgateBin, logLevel string, rep *report) error {
	bin := filepath.Join(ps.dir, "grpcupstream")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./e2e/bench/grpcupstream")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("grpc: go build ./e2e/bench/grpcupstream: %w", err)
	}
	be, err := ps.start("grpcupstream", bin, []string{"-listen", "127.0.0.1:0"}, true)
	if err != nil {
		return err
	}
	vk, err := startValkey(ctx, ps, "valkey-grpc", "")
	if err != nil {
		return err
	}
	extra := fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [%q]\nserver:\n  h2c: true\nroutes:\n  - name: create\n    match: \"grpc orders.v1.Orders/Create\"\n", vk.addr)
	g, err := startIdemgate(ctx, ps, idemgateBin, "idemgate-grpc", "h2c://"+be.addr, extra, logLevel)
	if err != nil {
		return err
	}
	direct := &target{id: "grpc direct", base: be.addr, proc: be}
	gate := &target{id: "grpc D", base: g.addr[len("http://"):], proc: g, meter: valkeyMeter{vk}}
	// Keys the replay phase cycles through, completed first.
	const replayKeys = 20 * owners
	prefix := "grpc-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	warm, err := grpcConns(gate.base)
	if err != nil {
		return err
	}
	for i := range replayKeys {
		if _, err := grpcCall(ctx, warm[0], grpcOwner(int64(i)), prefix+"r"+strconv.Itoa(i)); err != nil {
			return fmt.Errorf("grpc: completing replay keys: %w", err)
		}
	}
	closeConns(warm)
	for _, ph := range []struct {
		mode string
		t    *target
		key  func(n int64) string
	}{
		{"direct", direct, func(n int64) string { return "" }},
		{"passthrough", gate, func(n int64) string { return "" }},
		{"fresh", gate, func(n int64) string { return prefix + "f" + strconv.FormatInt(n, 10) }},
		// The n-th call's owner is grpcOwner(n): the key's first owner.
		{"replay", gate, func(n int64) string { return prefix + "r" + strconv.FormatInt(n%replayKeys, 10) }},
	} {
		conns, err := grpcConns(ph.t.base)
		if err != nil {
			return err
		}
		if o.warmup > 0 {
			grpcLoad(ctx, conns, o.concurrency, o.warmup, func(n int64) string {
				if ph.mode == "fresh" {
					return prefix + "w" + strconv.FormatInt(n, 10)
				}
				return ph.key(n)
			})
		}
		x, err := measure(ctx, ph.t, func() *phaseStats { return grpcLoad(ctx, conns, o.concurrency, o.duration, ph.key) })
		closeConns(conns)
		if err != nil {
			return err
		}
		x.workload, x.mode = wGRPC, ph.mode
		rep.grpc = append(rep.grpc, grpcRow{mode: ph.mode, row: x})
		fmt.Fprintf(os.Stderr, "%-11s %-11s %s: %8.0f calls/s p50 %v p99 %v errors %d replayed %d CPU %.0f µs/call %s\n",
			wGRPC, ph.mode, ph.t.id, x.s.rps(), x.s.quantile(0.5), x.s.quantile(0.99), x.s.errors, x.s.replayed,
			x.cpuSec*1e6/float64(max(1, x.s.requests)), x.s.firstErr)
	}
	return nil
}

// grpcOwner is the owner (x-user) of the n-th call: one of owners, the
// same for n and n + 200 (the replay phase's keys), since replayKeys is a
// multiple of owners.
func grpcOwner(n int64) string { return "user-" + strconv.FormatInt(n%owners, 10) }

// grpcConns dials 4 client connections to addr (h2c).
func grpcConns(addr string) ([]*grpc.ClientConn, error) {
	var conns []*grpc.ClientConn
	for range 4 {
		c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeConns(conns)
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeConns(conns []*grpc.ClientConn) {
	for _, c := range conns {
		_ = c.Close()
	}
}

// grpcCall makes one call as owner with key ("" for none) and reports
// whether idemgate answered it as a replay.
func grpcCall(ctx context.Context, c *grpc.ClientConn, owner, key string) (bool, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user", owner)
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	var header metadata.MD
	err := c.Invoke(ctx, grpcMethod, wrapperspb.String("order"), new(wrapperspb.StringValue), grpc.Header(&header))
	return len(header.Get("idempotent-replayed")) > 0 && header.Get("idempotent-replayed")[0] == "true", err
}

// grpcLoad keeps conc calls in flight over conns for d; key gives the n-th
// call's idempotency key.
func grpcLoad(ctx context.Context, conns []*grpc.ClientConn, conc int, d time.Duration, key func(n int64) string) *phaseStats {
	return closedLoop(ctx, conc, d, func(ctx context.Context, w int, n int64) (int, bool, error) {
		replayed, err := grpcCall(ctx, conns[w%len(conns)], grpcOwner(n), key(n))
		if err != nil {
			return 0, replayed, err
		}
		return 200, replayed, nil
	})
}

// grpcMarkdown is the gRPC workload's table.
func (r *report) grpcMarkdown(p func(string, ...any)) {
	if len(r.grpc) == 0 {
		return
	}
	p("### gRPC unary calls\n\n")
	p("A grpc-go client (%d calls in flight over 4 connections, closed loop, %v a phase) calling `orders.v1.Orders/Create` (a StringValue, answered with an `x-order-id` trailer) on `e2e/bench/grpcupstream` directly, and through idemgate on Valkey (h2c on its listener and to the backend: `upstream.url: h2c://…`, `server.h2c: true`, route `grpc orders.v1.Orders/Create`) without a key, with a fresh key per call, and with 320 completed keys in turn. CPU is the backend's for direct and idemgate's otherwise.\n\n", r.opts.concurrency, r.opts.duration)
	p("| call | calls/s | / direct | p50 ms | p99 ms | errors | replayed | CPU µs/call | Valkey CPU µs/call |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var direct float64
	for _, g := range r.grpc {
		x := g.row
		if g.mode == "direct" {
			direct = x.s.rps()
		}
		ratio := "-"
		if direct > 0 {
			ratio = fmt.Sprintf("%.2f", x.s.rps()/direct)
		}
		req := float64(max(1, x.s.requests))
		p("| %s | %.0f | %s | %s | %s | %d | %d | %.0f | %.0f |\n", g.mode, x.s.rps(), ratio, ms(x.s.quantile(0.5)), ms(x.s.quantile(0.99)),
			x.s.errors, x.s.replayed, x.cpuSec*1e6/req, x.storeCPUSec*1e6/req)
	}
	p("\n")
}

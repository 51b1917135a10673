package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/proxy"
)

// drain shuts the servers down after SIGTERM, within budget (0: no limit;
// config.Validate keeps it above upstream.timeout). The proxy listener
// closes at once; every request in flight gets its upstream answer (each
// call is bounded by upstream.timeout), records it in the store and writes
// it; responses the store refused are then given the rest of the budget to
// be recorded in the background (proxy.Proxy.Wait). Only then does the
// admin listener stop; the caller closes the store after drain returns.
// The caller marks the process draining before, so /readyz already says
// not ready. Past the budget drain returns an error and the process exits
// with whatever still runs cut off.
func drain(srv, adminSrv *http.Server, p *proxy.Proxy, budget time.Duration, log *slog.Logger) error {
	log.Info("shutting down: not ready, no new connections; waiting for requests in flight to finish and record their responses",
		"shutdown_timeout", budget.String())
	start := time.Now()
	p.Drain()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if budget > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, budget)
		defer stop()
	}
	// Shutdown returns once every handler has returned, and a handler
	// returns once its outcome is recorded or handed to the proxy's
	// background retry.
	err := srv.Shutdown(ctx)
	if err != nil {
		err = fmt.Errorf("requests still running: %w", err)
	} else if werr := p.Wait(ctx); werr != nil {
		err = werr
	}
	if aerr := adminSrv.Shutdown(ctx); aerr != nil {
		_ = adminSrv.Close()
	}
	if err != nil {
		return fmt.Errorf("graceful shutdown not finished within server.shutdown_timeout (%v): %w", budget, err)
	}
	log.Info("drained", "took_ms", time.Since(start).Milliseconds())
	return nil
}

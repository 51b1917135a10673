// Command upstream is the benchmark's backend: it answers every request with 201 and a fixed ~200-byte JSON body (/v1/big: the request body echoed), and counts what it executed.
//
// With -idemgate-config it is target G instead: the same handler inside a
// Go service, wrapped in idemgate's engine in process (package
// middleware) configured by that file, so the middleware's cost is this
// process's CPU less target A's for the same requests.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/logbuf"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/proxy"
)

// body is the ~200-byte JSON answer of every create; it is fixed so that
// every target moves the same bytes.
var body = []byte(`{"id":"ord_0000000000000001","status":"created","amount":4200,"currency":"EUR",` +
	`"customer":"cus_00000000000042","items":[{"sku":"sku-1","qty":1},{"sku":"sku-2","qty":2}],` +
	`"created_at":"2025-01-01T00:00:00Z","pad":"xxxxxxxxxxxx"}` + "\n")

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback only)")
	slowPrefix := flag.String("slow-prefix", "/v1/slow", "requests whose path starts with this are delayed by -delay")
	delay := flag.Duration("delay", 200*time.Millisecond, "delay of slow requests")
	idemgateConfig := flag.String("idemgate-config", "", "wrap the handler in idemgate's middleware configured by this file (target G)")
	flag.Parse()

	var calls, slowCalls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"calls": calls.Load(), "slow_calls": slowCalls.Load()})
	})
	// /v1/big echoes the request body (the big workload's 1 MiB upload),
	// with its length declared, so every target moves the same large
	// answer (docs/performance.md, "1 MiB request and response bodies").
	mux.HandleFunc("/v1/big", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		calls.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Read the whole request as a real API would before acting on it.
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		if strings.HasPrefix(r.URL.Path, *slowPrefix) {
			slowCalls.Add(1)
			time.Sleep(*delay)
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/v1/orders/ord_0000000000000001")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	var handler http.Handler = mux
	if *idemgateConfig != "" {
		cfg, err := config.Load(*idemgateConfig, os.Environ(), config.InProcess())
		if err != nil {
			log.Fatal(err)
		}
		// The middleware's default: its warnings, no access line per
		// request (Options.AccessLog, off), as a service wires it; lines
		// buffered as the proxy's are (internal/logbuf).
		out := logbuf.New(os.Stderr, logbuf.DefaultSize, logbuf.DefaultInterval)
		access := func(r slog.Record) bool { return r.Message == proxy.AccessLogMessage }
		idem, err := middleware.New(context.Background(), middleware.Options{
			Config:     cfg,
			Logger:     slog.New(logbuf.Handler(slog.NewJSONHandler(out, nil), out, access)),
			Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			log.Fatal(err)
		}
		handler = idem(mux)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, l.Addr().String())
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Fatal(srv.Serve(l))
}

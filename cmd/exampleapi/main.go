// Command exampleapi serves the small orders API that the quickstart puts idemgate in front of.
package main

import (
	"flag"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/idemgate/idemgate/internal/exampleapi"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3000", "address to listen on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("example API listening", "addr", *listen)
	srv := &http.Server{Addr: *listen, Handler: exampleapi.New().Handler(), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		log.Error("example API stopped", "err", err)
		os.Exit(1)
	}
}

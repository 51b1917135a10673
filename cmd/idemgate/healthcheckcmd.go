package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

func healthcheck(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "http://127.0.0.1:9090/healthz", "health endpoint to GET")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for an answer")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(*target)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate healthcheck: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "idemgate healthcheck: %s answered %s\n", *target, resp.Status)
		return 1
	}
	return 0
}

package admin

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/store"
	"github.com/idemgate/idemgate/store/memory"
)

// countingStore counts every record operation that reaches the store.
type countingStore struct {
	store.Store
	ops atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, id store.Identity) (*store.Record, error) {
	c.ops.Add(1)
	return c.Store.Get(ctx, id)
}

func (c *countingStore) Delete(ctx context.Context, id store.Identity) (bool, error) {
	c.ops.Add(1)
	return c.Store.Delete(ctx, id)
}

// TestAttackAdminPathAndMethodVariants sends, without the bearer token or
// with a wrong one, the request-target and method variants that could slip
// past a prefix check: every one must be answered without touching a
// record, and with the right token only the canonical path acts.
func TestAttackAdminPathAndMethodVariants(t *testing.T) {
	mem := memory.New()
	t.Cleanup(func() { mem.Close() })
	st := &countingStore{Store: mem}
	pol, err := policy.New(policy.DefaultRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Store: st, Token: testToken, V1Lookup: true, Policy: func() *policy.Policy { return pol }}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	send := func(line, auth string) int {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		req := line + " HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n"
		if auth != "" {
			req += "Authorization: " + auth + "\r\n"
		}
		if _, err := io.WriteString(c, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	q := "?route=default&owner=o&key=k&force=true"
	targets := []string{
		"/admin/records" + q, "//admin/records" + q, "/admin//records" + q, "/admin/./records" + q,
		"/x/../admin/records" + q, "/admin/records/" + q, "/admin%2Frecords" + q, "/admin/%72ecords" + q,
		"/ADMIN/records" + q, "/Admin/Records" + q, "/admin/records;x" + q, "/admin/records%00" + q,
		"http://admin/admin/records" + q, "/admin/records" + q + "&route=other",
	}
	methods := []string{"GET", "HEAD", "DELETE", "get", "delete", "POST", "PUT", "OPTIONS", "PATCH"}
	for _, auth := range []string{"", "Bearer wrong", "Basic " + testToken, "Bearer", "Bearer " + testToken + "x", "bearer  " + strings.ToUpper(testToken)} {
		for _, target := range targets {
			for _, m := range methods {
				if status := send(m+" "+target, auth); status < 300 || status >= 500 {
					t.Errorf("%s %s with Authorization %q: %d, want a 3xx or 4xx refusal", m, target, auth, status)
				}
			}
		}
	}
	if n := st.ops.Load(); n != 0 {
		t.Fatalf("%d record operations reached the store without the admin token", n)
	}
	if status := send("DELETE /admin/records"+q, "Bearer "+testToken); status != http.StatusNotFound || st.ops.Load() != 1 {
		t.Errorf("authorized purge of an absent record: %d after %d store operations, want 404 after 1", status, st.ops.Load())
	}
}

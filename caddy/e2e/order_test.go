package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyTopLevelBesideBlocksRefused: idempotency at the top of a site
// whose reverse_proxy sits in a handle, handle_path or route block, or in
// a named route it invokes (the usual Caddyfile of an API with more than
// one backend), would come after those blocks in Caddy's order and never
// see the requests they send on: every duplicate would reach the upstream
// with nothing to show for it. Ordering it first by default would run it
// before an authentication written inside a block
// (TestCaddyAuthInsideABlockIsNotBypassed). So Caddy refuses the site
// with an error that says where to put it; with the global option
// "order idempotency before invoke" the same site is enforced, the
// upstream runs once for a key and the retry is replayed. A block that
// reaches no backend (file_server) beside a top-level reverse_proxy is
// accepted and enforced as it always was.
func TestCaddyTopLevelBesideBlocksRefused(t *testing.T) {
	vk := valkeytest.Start(t)
	for i, form := range []string{
		"handle /orders* {\n\t\treverse_proxy %s\n\t}\n\thandle {\n\t\trespond 404\n\t}",
		"handle_path /orders* {\n\t\treverse_proxy %s\n\t}",
		"route /orders* {\n\t\treverse_proxy %s\n\t}",
		"invoke orders",
	} {
		block := strings.Fields(form)[0]
		t.Run(block, func(t *testing.T) {
			up := startUpstream(t)
			site := caddySite{
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-order-%d:", vk.Addr(), i),
				After:       fmt.Sprintf(form, strings.TrimPrefix(up.URL, "http://")),
			}
			if block == "invoke" {
				site.After = form
				site.Sites = fmt.Sprintf("&(orders) {\n\treverse_proxy %s\n}\n", strings.TrimPrefix(up.URL, "http://"))
			}
			if c, err := tryRunCaddy(t, site); err == nil {
				post(t, c.URL, "alice", "k-0", `{"amount":1}`)
				post(t, c.URL, "alice", "k-0", `{"amount":1}`)
				t.Fatalf("Caddy ran idempotency at the top beside a %s block (the upstream ran %d times for one key)", block, up.execs.Load())
			} else if !strings.Contains(err.Error(), "comes after its "+block) || !strings.Contains(err.Error(), "order idempotency before "+block) {
				t.Fatalf("refused without saying where to put it:\n%v", err)
			}

			site.Global = "order idempotency before invoke"
			c := runCaddy(t, site)
			first := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
			if first.Status != http.StatusCreated {
				t.Fatalf("first: %d %s\n%s", first.Status, first.Body, c.out.String())
			}
			retry := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
			if n := up.execs.Load(); n != 1 {
				t.Fatalf("idempotency ordered before a %s block: the upstream ran %d times for one key, want 1 (retry %d, Idempotent-Replayed %q)",
					block, n, retry.Status, retry.Header.Get("Idempotent-Replayed"))
			}
			sameResponse(t, first, retry)
		})
	}
	t.Run("block without a backend", func(t *testing.T) {
		up := startUpstream(t)
		c := runCaddy(t, caddySite{
			Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-order-static:", vk.Addr()),
			After:       fmt.Sprintf("handle /static/* {\n\t\troot * .\n\t\tfile_server\n\t}\n\treverse_proxy %s", strings.TrimPrefix(up.URL, "http://")),
		})
		first := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
		retry := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
		if n := up.execs.Load(); n != 1 || first.Status != http.StatusCreated {
			t.Fatalf("the upstream ran %d times for one key (first %d), want 1", n, first.Status)
		}
		sameResponse(t, first, retry)
	})
}

// TestCaddyRefusalReleasesKey: a handler after a top-level idempotency
// (ordered before handle, as the global option "order idempotency before
// handle" asks) that refuses a keyed request with a 4xx error before any
// upstream is picked (an `error` directive, file_server) releases the key: the client gets the handler's status,
// not 502 upstream-failed, and the same key runs once the refusal no
// longer applies, instead of 409 outcome-unknown forever.
func TestCaddyRefusalReleasesKey(t *testing.T) {
	vk := valkeytest.Start(t)
	send := func(t *testing.T, c *caddyProc, path string, h http.Header) answer {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h.Set("Idempotency-Key", "k")
		h.Set("X-User", "alice")
		resp, b, err := gatetest.Post(ctx, nil, c.URL+path, "", h, `{"amount":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
	}
	for i, tc := range []struct {
		name, site    string
		refusedPath   string
		refusedHeader http.Header
		status        int
		thenPath      string
		// thenPath, thenHeader: the same key, no longer refused; "": the
		// refusal again.
		thenHeader http.Header
	}{
		{"error", "@closed header X-Closed 1\n\terror @closed \"closed\" 403\n\treverse_proxy %s",
			"/orders", http.Header{"X-Closed": {"1"}}, http.StatusForbidden, "/orders", http.Header{}},
		{"file_server", "handle /orders* {\n\t\treverse_proxy %s\n\t}\n\thandle {\n\t\troot * .\n\t\tfile_server\n\t}",
			"/missing", http.Header{}, http.StatusNotFound, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t)
			c := runCaddy(t, caddySite{
				Global:      "order idempotency before handle",
				Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-refused-%d:", vk.Addr(), i),
				After:       fmt.Sprintf(tc.site, strings.TrimPrefix(up.URL, "http://")),
			})
			first := send(t, c, tc.refusedPath, tc.refusedHeader)
			if first.Status != tc.status {
				t.Fatalf("refused: %d %q, want the handler's %d\n%s", first.Status, first.Body, tc.status, c.out.String())
			}
			if tc.thenPath == "" {
				// Refused again, not 409 outcome-unknown.
				if again := send(t, c, tc.refusedPath, tc.refusedHeader); again.Status != tc.status {
					t.Fatalf("retry: %d %q, want the handler's %d again\n%s", again.Status, again.Body, tc.status, c.out.String())
				}
				return
			}
			then := send(t, c, tc.thenPath, tc.thenHeader)
			if then.Status != http.StatusCreated || up.execs.Load() != 1 {
				t.Fatalf("the same key once not refused: %d %q, upstream ran %d times; want 201 once\n%s", then.Status, then.Body, up.execs.Load(), c.out.String())
			}
		})
	}
}

// TestCaddyNestedBesideBlocksRefused: Caddy sorts the directives inside
// a handle or handle_path block by the same order as a site's, so an
// idempotency there comes after a handle or route block nested beside it
// and never sees the requests that block sends to a backend: each
// duplicate reached the upstream. Caddy refuses it as it refuses the same
// site at the top; ordered before the blocks it is enforced. An
// idempotency at the top beside a block with its own idempotency is
// accepted: each one enforces its requests. The same holds in a named
// route, whose directives Caddy sorts too, and past a quoted brace. In a
// route block, which runs its directives as written, idempotency written
// after a block that proxies is refused, and accepted written first.
func TestCaddyNestedBesideBlocksRefused(t *testing.T) {
	vk := valkeytest.Start(t)
	for i, tc := range []struct {
		name, outer, inner string
		// before: the outer block's lines before idempotency; path: the
		// outer block's request path prefix.
		before, path string
	}{
		{"handle/handle", "handle", "handle", "", ""},
		{"handle_path/route", "handle_path /v1*", "route", "", "/v1"},
		// A quoted brace opens no block: the nested handle is still seen.
		{"quoted brace", "handle", "handle", "respond /never \"{\" 200\n\t\t", ""},
		// A named route's directives are sorted as a handle block's.
		{"named route", "&(orders)", "handle", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t)
			block := fmt.Sprintf("%s {\n\t\t%sidempotency {\n\t\t\tconfig $CONFIG\n\t\t\tstore_addrs %s\n\t\t\tkey_prefix caddy-nested-%d:\n\t\t}\n\t\t%s /orders* {\n\t\t\treverse_proxy %s\n\t\t}\n\t}",
				tc.outer, tc.before, vk.Addr(), i, tc.inner, strings.TrimPrefix(up.URL, "http://"))
			site := caddySite{Directive: block}
			if strings.HasPrefix(tc.outer, "&") {
				site = caddySite{Directive: "invoke orders", Sites: block + "\n"}
			}
			if c, err := tryRunCaddy(t, site); err == nil {
				post(t, c.URL+tc.path, "alice", "k-0", `{"amount":1}`)
				post(t, c.URL+tc.path, "alice", "k-0", `{"amount":1}`)
				t.Fatalf("Caddy ran idempotency in a %s block beside a %s block (the upstream ran %d times for one key)", tc.outer, tc.inner, up.execs.Load())
			} else if !strings.Contains(err.Error(), "comes after its "+tc.inner) || !strings.Contains(err.Error(), "order idempotency before "+tc.inner) {
				t.Fatalf("refused without saying where to put it:\n%v", err)
			}

			site.Global = "order idempotency before invoke"
			c := runCaddy(t, site)
			first := post(t, c.URL+tc.path, "alice", "k-1", `{"amount":1}`)
			if first.Status != http.StatusCreated {
				t.Fatalf("first: %d %s\n%s", first.Status, first.Body, c.out.String())
			}
			retry := post(t, c.URL+tc.path, "alice", "k-1", `{"amount":1}`)
			if n := up.execs.Load(); n != 1 {
				t.Fatalf("nested idempotency ordered before a %s block: the upstream ran %d times for one key, want 1", tc.inner, n)
			}
			sameResponse(t, first, retry)
		})
	}
	t.Run("route written after a block", func(t *testing.T) {
		// A route runs its directives as written: written after a block
		// that proxies, idempotency never sees its requests.
		up := startUpstream(t)
		idem := fmt.Sprintf("idempotency {\n\t\t\tconfig $CONFIG\n\t\t\tstore_addrs %s\n\t\t\tkey_prefix caddy-nested-route:\n\t\t}", vk.Addr())
		proxy := "handle /orders* {\n\t\t\treverse_proxy " + strings.TrimPrefix(up.URL, "http://") + "\n\t\t}"
		site := caddySite{Directive: "route {\n\t\t" + proxy + "\n\t\t" + idem + "\n\t}"}
		if c, err := tryRunCaddy(t, site); err == nil {
			post(t, c.URL, "alice", "k-0", `{"amount":1}`)
			post(t, c.URL, "alice", "k-0", `{"amount":1}`)
			t.Fatalf("Caddy ran idempotency written after a handle block in a route (the upstream ran %d times for one key)", up.execs.Load())
		} else if !strings.Contains(err.Error(), "written after the handle") || !strings.Contains(err.Error(), "write idempotency before it") {
			t.Fatalf("refused without saying where to put it:\n%v", err)
		}
		c := runCaddy(t, caddySite{Directive: "route {\n\t\t" + idem + "\n\t\t" + proxy + "\n\t}"})
		first := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
		retry := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
		if n := up.execs.Load(); n != 1 || first.Status != http.StatusCreated {
			t.Fatalf("idempotency written first in a route: the upstream ran %d times for one key (first %d), want 1", n, first.Status)
		}
		sameResponse(t, first, retry)
	})
	t.Run("block with its own idempotency", func(t *testing.T) {
		up, other := startUpstream(t), startUpstream(t)
		c := runCaddy(t, caddySite{
			Directive: fmt.Sprintf("idempotency {\n\t\tconfig $CONFIG\n\t\tstore_addrs %s\n\t\tkey_prefix caddy-nested-top:\n\t\tname top\n\t}\n\t"+
				"handle /orders* {\n\t\tidempotency {\n\t\t\tconfig $CONFIG\n\t\t\tstore_addrs %s\n\t\t\tkey_prefix caddy-nested-own:\n\t\t\tname own\n\t\t}\n\t\treverse_proxy %s\n\t}",
				vk.Addr(), vk.Addr(), strings.TrimPrefix(up.URL, "http://")),
			After: "reverse_proxy " + strings.TrimPrefix(other.URL, "http://"),
		})
		for _, tc := range []struct {
			path string
			up   *upstream
		}{{"/orders", up}, {"/payments", other}} {
			first := post(t, c.URL+tc.path, "alice", "k-1", `{"amount":1}`)
			retry := post(t, c.URL+tc.path, "alice", "k-1", `{"amount":1}`)
			if n := tc.up.execs.Load(); n != 1 || first.Status != http.StatusCreated {
				t.Fatalf("%s: the upstream ran %d times for one key (first %d), want 1\n%s", tc.path, n, first.Status, c.out.String())
			}
			sameResponse(t, first, retry)
		}
	})
}

// TestCaddyInterceptBesideRefused: intercept comes before idempotency in
// Caddy's order and runs its handle_response routes once the handlers it
// wraps have answered, so a reverse_proxy there (a fallback for a 5xx) is
// reached by every attempt of a key, a replay's included: the fallback ran
// once per retry. Caddy refuses the site, and an idempotency in a handle
// block that such an intercept wraps; ordered before intercept,
// idempotency stores the fallback's answer and the retry is replayed.
func TestCaddyInterceptBesideRefused(t *testing.T) {
	vk := valkeytest.Start(t)
	fallback := startUpstream(t)
	site := caddySite{
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-intercept:", vk.Addr()),
		After: fmt.Sprintf("intercept {\n\t\t@down status 5xx\n\t\thandle_response @down {\n\t\t\treverse_proxy %s\n\t\t}\n\t}\n\trespond 503",
			strings.TrimPrefix(fallback.URL, "http://")),
	}
	if c, err := tryRunCaddy(t, site); err == nil {
		post(t, c.URL, "alice", "k-0", `{"amount":1}`)
		post(t, c.URL, "alice", "k-0", `{"amount":1}`)
		t.Fatalf("Caddy ran idempotency beside an intercept that proxies (the fallback ran %d times for one key)", fallback.execs.Load())
	} else if !strings.Contains(err.Error(), "comes after its intercept") || !strings.Contains(err.Error(), "order idempotency before intercept") {
		t.Fatalf("refused without saying where to put it:\n%v", err)
	}

	// Inside a handle block the intercept at the top of the site wraps it.
	nested := caddySite{Directive: fmt.Sprintf("handle /orders* {\n\t\tidempotency {\n\t\t\tconfig $CONFIG\n\t\t\tstore_addrs %s\n\t\t\tkey_prefix caddy-intercept-nested:\n\t\t}\n\t\trespond 503\n\t}\n\t", vk.Addr()) +
		strings.SplitN(site.After, "\n\trespond", 2)[0] + "\n\trespond 404"}
	if c, err := tryRunCaddy(t, nested); err == nil {
		before := fallback.execs.Load()
		post(t, c.URL, "alice", "k-0", `{"amount":1}`)
		post(t, c.URL, "alice", "k-0", `{"amount":1}`)
		t.Fatalf("Caddy ran idempotency in a handle block inside an intercept that proxies (the fallback ran %d times for one key)", fallback.execs.Load()-before)
	} else if !strings.Contains(err.Error(), "the intercept") || !strings.Contains(err.Error(), "order idempotency before intercept") {
		t.Fatalf("refused without saying where to put it:\n%v", err)
	}

	site.Global = "order idempotency before intercept"
	c := runCaddy(t, site)
	first := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
	retry := post(t, c.URL, "alice", "k-1", `{"amount":1}`)
	if n := fallback.execs.Load(); n != 1 || first.Status != http.StatusCreated {
		t.Fatalf("idempotency ordered before intercept: the fallback ran %d times for one key (first %d %s), want 1\n%s", n, first.Status, first.Body, c.out.String())
	}
	sameResponse(t, first, retry)
}

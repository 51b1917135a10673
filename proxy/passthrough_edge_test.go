package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store/memory"
)

// bodyRecorder is an upstream that records each request's path and body.
type bodyRecorder struct {
	mu     sync.Mutex
	bodies []string
}

func (b *bodyRecorder) seen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bodies...)
}

func adv4Front(t *testing.T, readTimeout time.Duration) (string, *bodyRecorder) {
	addr, rec, _ := adv4FrontTLS(t, readTimeout, false)
	return addr, rec
}

func adv4FrontTLS(t *testing.T, readTimeout time.Duration, h2 bool) (string, *bodyRecorder, *httptest.Server) {
	t.Helper()
	rec := &bodyRecorder{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		rec.mu.Lock()
		s := r.Method + " " + r.URL.Path + " " + string(body)
		if err != nil {
			s += " ERR " + err.Error()
		}
		rec.bodies = append(rec.bodies, s)
		rec.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(up.Close)
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	pol, err := policy.New(baseRoute(), nil)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{Upstream: target, Store: st, Timeout: 5 * time.Second, Policy: func() *policy.Policy { return pol }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewUnstartedServer(p)
	front.Config.ReadTimeout = readTimeout
	if h2 {
		front.EnableHTTP2 = true
		front.StartTLS()
	} else {
		front.Start()
	}
	t.Cleanup(front.Close)
	return front.Listener.Addr().String(), rec, front
}

// TestPassthroughHTTP2SmallBodies: over HTTP/2 a small body with a
// declared length, one without, and one expecting 100 Continue all arrive
// whole and once.
func TestPassthroughHTTP2SmallBodies(t *testing.T) {
	_, rec, front := adv4FrontTLS(t, 5*time.Second, true)
	client := front.Client()
	for i, c := range []struct {
		length int64
		expect bool
	}{{5, false}, {-1, false}, {5, true}} {
		req, _ := http.NewRequest("POST", front.URL+"/v1/h2", io.MultiReader(strings.NewReader("hel"), strings.NewReader("lo")))
		req.ContentLength = c.length
		if c.expect {
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("case %d: %s %d", i, resp.Proto, resp.StatusCode)
		}
		if got := rec.seen(); len(got) != i+1 || got[i] != "POST /v1/h2 hello" {
			t.Fatalf("case %d: upstream saw %q", i, got)
		}
	}
}

func rawExchange(t *testing.T, addr, raw string, closeWrite bool, n int) []int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	if closeWrite {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	br := bufio.NewReader(c)
	var statuses []int
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
	return statuses
}

// TestPassthroughSlowBodyNeverReachesUpstream: a client that declares a
// small body and then stalls holds only its own connection; when the read
// timeout ends it, nothing was sent upstream.
func TestPassthroughSlowBodyNeverReachesUpstream(t *testing.T) {
	addr, rec := adv4Front(t, 300*time.Millisecond)
	st := rawExchange(t, addr, "POST /v1/slow HTTP/1.1\r\nHost: gate\r\nContent-Length: 100\r\n\r\naaaaaaaaaa", false, 1)
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("upstream saw %q after a stalled body (client got %v)", got, st)
	}
	t.Logf("client got %v", st)
}

// TestPassthroughBodyLongerThanItsLength: bytes past Content-Length are
// not the body: the upstream gets exactly Content-Length bytes, and the
// rest is a request of its own (here a malformed one, refused).
func TestPassthroughBodyLongerThanItsLength(t *testing.T) {
	addr, rec := adv4Front(t, 5*time.Second)
	st := rawExchange(t, addr, "POST /v1/a HTTP/1.1\r\nHost: gate\r\nContent-Length: 5\r\n\r\nhelloPOST /v1/b HTTP/1.1\r\nHost: gate\r\nContent-Length: 3\r\n\r\nxyz", false, 2)
	got := rec.seen()
	if len(got) != 2 || got[0] != "POST /v1/a hello" || got[1] != "POST /v1/b xyz" {
		t.Fatalf("upstream saw %q (client got %v), want the two pipelined requests with their own bodies", got, st)
	}
}

// TestPassthroughLengthAndChunked: a request with both Content-Length and
// Transfer-Encoding: chunked is either refused or framed by the chunked
// coding alone, never by its Content-Length (request smuggling).
func TestPassthroughLengthAndChunked(t *testing.T) {
	addr, rec := adv4Front(t, 5*time.Second)
	st := rawExchange(t, addr, "POST /v1/a HTTP/1.1\r\nHost: gate\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false, 1)
	got := rec.seen()
	for _, s := range got {
		if s != "POST /v1/a hello" {
			t.Fatalf("upstream saw %q (client got %v)", got, st)
		}
	}
	t.Logf("upstream %q client %v", got, st)
}

// TestPassthroughExpectContinueVariants: a small body sent after 100
// Continue, whatever the case of the expectation, arrives whole.
func TestPassthroughExpectContinueVariants(t *testing.T) {
	for _, exp := range []string{"100-continue", "100-Continue", "100-CONTINUE"} {
		addr, rec := adv4Front(t, 5*time.Second)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "POST /v1/e HTTP/1.1\r\nHost: gate\r\nContent-Length: 5\r\nExpect: "+exp+"\r\n\r\n")
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
			c.Close()
			t.Fatalf("%s: first line %q %v, want 100 Continue", exp, line, err)
		}
		br.ReadString('\n')
		io.WriteString(c, "hello")
		// The upstream's own 100 Continue is relayed too (ReverseProxy
		// forwards 1xx answers); RFC 9110 allows several.
		var resp *http.Response
		for resp == nil || resp.StatusCode == http.StatusContinue {
			if resp, err = http.ReadResponse(br, nil); err != nil {
				c.Close()
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		c.Close()
		if got := rec.seen(); resp.StatusCode != 200 || len(got) != 1 || got[0] != "POST /v1/e hello" {
			t.Fatalf("%s: %d, upstream saw %q", exp, resp.StatusCode, got)
		}
	}
}

// TestEnforcedTruncatedBodyNeverReachesUpstream: the enforced path reads
// its body as before; a truncated one is refused and claims nothing.
func TestEnforcedTruncatedBodyNeverReachesUpstream(t *testing.T) {
	addr, rec := adv4Front(t, 5*time.Second)
	st := rawExchange(t, addr, "POST /v1/a HTTP/1.1\r\nHost: gate\r\nX-User: alice\r\nIdempotency-Key: k1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":1}", true, 1)
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("upstream saw %q (client got %v)", got, st)
	}
	if len(st) != 1 || st[0] != 400 {
		t.Fatalf("client got %v, want 400", st)
	}
}

package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/proxy"
)

// TestNewTransportKeepsEveryIdleConnectionPerHost pins that no limit across
// hosts undercuts the per-host one: with DefaultTransport's MaxIdleConns of
// 100, an upstream with more requests in flight than that lost a
// connection with every answer and dialled a new one for a later request.
func TestNewTransportKeepsEveryIdleConnectionPerHost(t *testing.T) {
	tr := proxy.NewTransport(time.Second)
	if tr.MaxIdleConnsPerHost < 256 {
		t.Fatalf("MaxIdleConnsPerHost %d, want at least 256", tr.MaxIdleConnsPerHost)
	}
	if tr.MaxIdleConns != 0 && tr.MaxIdleConns < tr.MaxIdleConnsPerHost {
		t.Fatalf("MaxIdleConns %d caps MaxIdleConnsPerHost %d", tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	}
}

// TestKeyedRequestNotResentOnAClosedConnection pins that net/http's
// transport never sends a claimed request a second time by itself: it
// re-sends a request carrying Idempotency-Key whose reused connection
// closed before any answer, when it can rewind the body (GetBody, or
// http.NoBody). Here the upstream reads the second request on its
// connection and closes it: the outcome is unknown, the client gets 502,
// and the upstream saw that request once, whatever the body's size.
func TestKeyedRequestNotResentOnAClosedConnection(t *testing.T) {
	for _, size := range []int{0, 1 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			var got atomic.Int64
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						for {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							_, _ = io.Copy(io.Discard, req.Body)
							if got.Add(1) > 1 {
								return // read, maybe acted on, never answered
							}
							_, _ = io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
						}
					}()
				}
			}()
			front := newFront(t, "http://"+l.Addr().String())
			codes := make([]int, 2)
			for i := range codes {
				req, _ := http.NewRequest("POST", front+"/v1/orders", strings.NewReader(strings.Repeat("z", size)))
				req.Header.Set("X-User", "alice")
				req.Header.Set("Idempotency-Key", `"k`+strconv.Itoa(i)+`"`)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}
			if codes[0] != http.StatusCreated || codes[1] != http.StatusBadGateway || got.Load() != 2 {
				t.Errorf("statuses %v, upstream read %d requests; want [201 502] and 2 (the second not re-sent)", codes, got.Load())
			}
		})
	}
}

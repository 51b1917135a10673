package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// TestPolicyMarkdownUnknownStatuses: the published policy of a route with
// unknown_statuses tells its clients what a retry after such an answer
// gets: refused for good on a reject route, refused only while the lease
// lasts and then run again on a takeover route (never "refused" alone,
// which a client would read as safe to retry).
func TestPolicyMarkdownUnknownStatuses(t *testing.T) {
	for _, tc := range []struct{ onAbandoned, want, wantNot string }{
		{"reject", "as for any request whose outcome is unknown", "performed again, so the operation may run twice"},
		{"takeover", "while the first attempt's lease lasts, then performed again, so the operation may run twice", "as for any request whose outcome is unknown"},
	} {
		t.Run(tc.onAbandoned, func(t *testing.T) {
			cfg, err := config.Parse([]byte(`upstream: {url: "http://127.0.0.1:3000"}
defaults:
  owner: "header:X-User"
  unknown_statuses: [504]
  on_abandoned: `+tc.onAbandoned+"\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := writeMarkdown(&b, publish(cfg.Policy, cfg.Problems.TypeBase)); err != nil {
				t.Fatal(err)
			}
			md := b.String()
			if !strings.Contains(md, "**Outcome unknown**: 504") || !strings.Contains(md, tc.want) || strings.Contains(md, tc.wantNot) {
				t.Fatalf("on_abandoned %s: the policy says\n%s\nwant %q, not %q", tc.onAbandoned, md, tc.want, tc.wantNot)
			}
		})
	}
}

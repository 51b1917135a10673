package problem

import (
	"encoding/base64"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TestGRPCCodeForEveryProxyKind: every kind the proxy answers with has a
// gRPC code of its own choosing (no silent UNKNOWN), and none that may
// have reached the upstream is one a retry policy resends.
func TestGRPCCodeForEveryProxyKind(t *testing.T) {
	for _, k := range Catalog() {
		if k.Outcome == "" {
			continue
		}
		if _, ok := grpcCodes[k.Slug]; !ok {
			t.Errorf("%s has no gRPC code", k.Slug)
		}
	}
	for _, k := range []Kind{UpstreamFailed, UpstreamTimeout, OutcomeUnknown} {
		if c := k.GRPCCode(); c == codes.Unavailable || c == codes.Aborted || c == codes.ResourceExhausted {
			t.Errorf("%s maps to %v, which retry policies resend although the upstream may have acted", k.Slug, c)
		}
	}
}

// TestWriteGRPC: a trailers-only gRPC answer with the code, the
// percent-encoded message, the pushback, and a google.rpc.Status whose
// ErrorInfo names the problem.
func TestWriteGRPC(t *testing.T) {
	w := httptest.NewRecorder()
	d := KeyReused.With("50% different \"body\"\n")
	d.RequestID, d.RetryAfter = "req-1", 2
	Publisher{TypeBase: "https://api.example/problems/"}.WriteGRPC(w, d, "application/grpc+proto")
	h := w.Header()
	if w.Code != 200 || h.Get("Grpc-Status") != "9" || h.Get("Content-Type") != "application/grpc+proto" || w.Body.Len() != 0 {
		t.Fatalf("status %d, headers %v, body %q", w.Code, h, w.Body)
	}
	if got := h.Get("Grpc-Message"); got != `50%25 different "body"%0A` {
		t.Errorf("grpc-message %q", got)
	}
	if got := h.Get("Grpc-Retry-Pushback-Ms"); got != "2000" {
		t.Errorf("pushback %q", got)
	}
	b, err := base64.RawStdEncoding.DecodeString(h.Get("Grpc-Status-Details-Bin"))
	if err != nil {
		t.Fatal(err)
	}
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil || st.Code != 9 || len(st.Details) != 1 {
		t.Fatalf("status %v, %v", &st, err)
	}
	var info errdetails.ErrorInfo
	if err := st.Details[0].UnmarshalTo(&info); err != nil {
		t.Fatal(err)
	}
	if info.Reason != "key-reused" || info.Domain != "idemgate" || info.Metadata["type"] != "https://api.example/problems/key-reused" || info.Metadata["request_id"] != "req-1" {
		t.Errorf("error info %v", &info)
	}
}

// TestGRPCMappingMatchesREADME keeps the gRPC status table of docs/grpc.md
// ("Statuses idemgate answers with") and grpcCodes one list.
func TestGRPCMappingMatchesREADME(t *testing.T) {
	data, err := os.ReadFile("../docs/grpc.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "\n## Statuses idemgate answers with\n")
	if start < 0 {
		t.Fatal(`docs/grpc.md has no "## Statuses idemgate answers with" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| `([A-Z_]+)` \\|$")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = m[2]
	}
	for slug, code := range grpcCodes {
		if got := documented[slug]; got != grpcName(code) {
			t.Errorf("docs/grpc.md gives %s as %q, the code is %s", slug, got, grpcName(code))
		}
		delete(documented, slug)
	}
	for slug := range documented {
		t.Errorf("docs/grpc.md maps %s, which has no gRPC code", slug)
	}
}

// grpcName is a code's name as gRPC's status code list spells it.
func grpcName(c codes.Code) string {
	names := map[codes.Code]string{codes.InvalidArgument: "INVALID_ARGUMENT", codes.Unauthenticated: "UNAUTHENTICATED",
		codes.ResourceExhausted: "RESOURCE_EXHAUSTED", codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Unavailable: "UNAVAILABLE",
		codes.DataLoss: "DATA_LOSS", codes.Unknown: "UNKNOWN", codes.DeadlineExceeded: "DEADLINE_EXCEEDED"}
	return names[c]
}

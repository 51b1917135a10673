package middleware_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// readmeBlock returns the first ```lang block of README.md's section
// (its "## " title) that contains has.
func readmeBlock(t *testing.T, section, lang, has string) string {
	t.Helper()
	return docBlock(t, "README.md", section, lang, has)
}

// docBlock returns the first ```lang block of the section (its "## "
// title) of file, a path from the repository's root, that contains has.
func docBlock(t *testing.T, file, section, lang, has string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(b), "\n## "+section+"\n")
	if !ok {
		t.Fatalf("%s: no section %q", file, section)
	}
	body, _, _ = strings.Cut(body, "\n## ")
	for _, part := range strings.Split(body, "```"+lang+"\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		if strings.Contains(block, has) {
			return block
		}
	}
	t.Fatalf("%s: no %s block with %q in %q", file, lang, has, section)
	return ""
}

// offline is the environment of the go commands of these tests: nothing
// is looked up (no module proxy, no checksum database, no workspace);
// what a build needs comes from the module cache, as README promises for
// a checkout whose dependencies were downloaded once.
func offline() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
}

// goIn runs a go command (or another one) in dir, offline, and fails the
// test with its output when it fails.
func goIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, offline()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// serviceModule makes a new module in a temporary directory that depends
// on this checkout the way README's "Inside your Go service" says: its
// `go mod edit` line, with /path/to/idemgate the checkout.
func serviceModule(t *testing.T) string {
	t.Helper()
	checkout, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var edit string
	for _, line := range strings.Split(readmeBlock(t, "Inside your Go service", "sh", "go mod edit"), "\n") {
		if strings.HasPrefix(line, "go mod edit ") {
			edit = strings.ReplaceAll(line, "/path/to/idemgate", checkout)
		}
	}
	if edit == "" {
		t.Fatal(`README.md: no "go mod edit" line in "Inside your Go service"`)
	}
	dir := t.TempDir()
	goIn(t, dir, "go", "mod", "init", "example.com/svc")
	goIn(t, dir, "sh", "-c", edit)
	return dir
}

// TestREADMEDependOnCheckout: a new service module that depends on a
// checkout as README says builds README's complete service, with nothing
// looked up on the module proxy (where github.com/idemgate/idemgate is not).
func TestREADMEDependOnCheckout(t *testing.T) {
	dir := serviceModule(t)
	src := readmeBlock(t, "Inside your Go service", "go", "middleware.New(")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	goIn(t, dir, "go", "build", "-o", "svc", ".")
}

// TestREADMEGRPCWithoutProtoc builds the gRPC program of docs/grpc.md
// ("Without protoc") in a new module and runs its two halves: the server,
// called directly, and the client through the engine, whose refusal (its
// store is not there: 503 store-unavailable, a gRPC UNAVAILABLE) it reads
// from the ErrorInfo the errdetails import registers.
func TestREADMEGRPCWithoutProtoc(t *testing.T) {
	dir := serviceModule(t)
	src := docBlock(t, "docs/grpc.md", "Without protoc", "go", "grpc.ServiceDesc{")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	goIn(t, dir, "go", "build", "-o", "orders", ".")
	bin := filepath.Join(dir, "orders")

	addr := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	server := exec.Command(bin, "-serve", addr)
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	if !gatetest.Until(10*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("the server did not listen on %s", addr)
	}
	out, err := exec.Command(bin, "-gate", addr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ord_1 for alice") {
		t.Fatalf("client against the server: %v\n%s", err, out)
	}

	// The engine in front, its Valkey absent: keyed calls are refused.
	yaml := fmt.Sprintf("store:\n  driver: valkey\n  valkey:\n    addrs: [\"127.0.0.1:%d\"]\ndefaults:\n  owner: authorization\nroutes:\n  - name: create-order\n    match: \"grpc orders.v1.Orders/Create\"\n    required: true\n", valkeytest.FreePort(t))
	idem := engine(t, yaml)
	gate := serveH2C(t, idem(http.NotFoundHandler()))
	out, err = exec.Command(bin, "-gate", strings.TrimPrefix(gate.URL, "http://")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Unavailable: store-unavailable (request ") {
		t.Fatalf("client through the engine with its store down: %v\n%s; want the ErrorInfo reason store-unavailable", err, out)
	}
	t.Logf("client through the engine: %s", out)
}

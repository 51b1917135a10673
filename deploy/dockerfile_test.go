package deploy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	Line int    // 1-based line of the keyword
	Cmd  string // upper-cased keyword: FROM, RUN, ...
	Args string // the rest, flags included
}

// stage is one FROM ... [AS name] block.
type stage struct {
	Name  string // lower-cased AS name; "" when unnamed
	Base  string // image or earlier stage after FROM
	Instr []instruction
}

// parseDockerfile splits a Dockerfile into stages. It handles comments,
// the parser directive line, and backslash continuations; heredocs are not
// used in this repository.
func parseDockerfile(t *testing.T, p string) []stage {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	var (
		stages []stage
		cur    *instruction
	)
	flush := func() {
		if cur == nil {
			return
		}
		in := *cur
		cur = nil
		if in.Cmd == "FROM" {
			f := strings.Fields(in.Args)
			var s stage
			for i := 0; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					s.Name = strings.ToLower(f[i+1])
					i++
				case s.Base == "":
					s.Base = f[i]
				}
			}
			stages = append(stages, s)
		}
		if len(stages) == 0 {
			if in.Cmd != "ARG" {
				t.Errorf("%s:%d: %s before the first FROM", p, in.Line, in.Cmd)
			}
			return
		}
		stages[len(stages)-1].Instr = append(stages[len(stages)-1].Instr, in)
	}
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur == nil) {
			continue
		}
		cont := strings.HasSuffix(trimmed, "\\")
		text := strings.TrimSpace(strings.TrimSuffix(trimmed, "\\"))
		if cur == nil {
			kw, rest, _ := strings.Cut(text, " ")
			cur = &instruction{Line: i + 1, Cmd: strings.ToUpper(kw), Args: strings.TrimSpace(rest)}
		} else if text != "" {
			cur.Args += " " + text
		}
		if !cont {
			flush()
		}
	}
	flush()
	if len(stages) == 0 {
		t.Fatalf("%s has no FROM", p)
	}
	return stages
}

// find returns the stage's instructions with keyword cmd.
func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.Instr {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// execForm decodes a JSON exec-form argument list such as ["/idemgate"].
func execForm(t *testing.T, in instruction, args string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(args), &out); err != nil {
		t.Fatalf("Dockerfile:%d: %s %s is not exec form (JSON array): %v", in.Line, in.Cmd, args, err)
	}
	return out
}

// byName indexes stages by their AS name.
func byName(stages []stage) map[string]stage {
	m := map[string]stage{}
	for _, s := range stages {
		if s.Name != "" {
			m[s.Name] = s
		}
	}
	return m
}

// copiedFrom returns the stage names that s copies files from.
func copiedFrom(s stage) []string {
	var out []string
	for _, in := range s.find("COPY") {
		for _, f := range strings.Fields(in.Args) {
			if from, ok := strings.CutPrefix(f, "--from="); ok {
				out = append(out, strings.ToLower(from))
			}
		}
	}
	return out
}

// ancestry returns s and the named stages it is built FROM, innermost first.
func ancestry(stages map[string]stage, s stage) []stage {
	out := []stage{s}
	for {
		parent, ok := stages[strings.ToLower(s.Base)]
		if !ok || slices.ContainsFunc(out, func(x stage) bool { return x.Name == parent.Name }) {
			return out
		}
		out = append(out, parent)
		s = parent
	}
}

// checkGoBuildStage checks that the named build stage (and its parents)
// compile pkg statically, reproducibly and with the version stamped.
func checkGoBuildStage(t *testing.T, stages map[string]stage, name, pkg string) {
	t.Helper()
	s, ok := stages[name]
	if !ok {
		t.Errorf("Dockerfile: no stage %q", name)
		return
	}
	var all []instruction
	for _, a := range ancestry(stages, s) {
		all = append(all, a.Instr...)
	}
	var build string
	cgoOff, versionArg := false, false
	for _, in := range all {
		switch in.Cmd {
		case "RUN":
			if strings.Contains(in.Args, "go build") && strings.Contains(in.Args, pkg) {
				build = in.Args
			}
			if strings.Contains(in.Args, "CGO_ENABLED=0") {
				cgoOff = true
			}
		case "ENV":
			if strings.Contains(in.Args, "CGO_ENABLED=0") {
				cgoOff = true
			}
		case "ARG":
			if strings.TrimSpace(in.Args) == "VERSION=dev" {
				versionArg = true
			}
		}
	}
	if build == "" {
		t.Errorf("Dockerfile stage %s: no `go build ... %s`", name, pkg)
		return
	}
	if !cgoOff {
		t.Errorf("Dockerfile stage %s: CGO_ENABLED=0 not set; the distroless/static image has no libc", name)
	}
	if !versionArg {
		t.Errorf("Dockerfile stage %s: needs ARG VERSION=dev (the stamp's default)", name)
	}
	for _, want := range []string{"-trimpath", "-s -w", "-X main.version=${VERSION}"} {
		if !strings.Contains(build, want) {
			t.Errorf("Dockerfile stage %s: go build lacks %q: %s", name, want, build)
		}
	}
}

// checkRuntimeStage checks a final image: static non-root base and a
// numeric non-root USER (so Kubernetes runAsNonRoot can verify it).
func checkRuntimeStage(t *testing.T, s stage) {
	t.Helper()
	if s.Base != "scratch" && !strings.HasPrefix(s.Base, "gcr.io/distroless/static") {
		t.Errorf("Dockerfile stage %s: base %s, want gcr.io/distroless/static* or scratch", s.Name, s.Base)
	}
	users := s.find("USER")
	if len(users) == 0 {
		t.Errorf("Dockerfile stage %s: no USER; the image must not run as root", s.Name)
		return
	}
	u := users[len(users)-1].Args
	uid, _, _ := strings.Cut(u, ":")
	if n, err := strconv.Atoi(uid); err != nil || n != 65532 {
		t.Errorf("Dockerfile stage %s: USER %s, want numeric 65532[:65532]", s.Name, u)
	}
	for _, in := range s.find("RUN") {
		t.Errorf("Dockerfile:%d: RUN in runtime stage %s; distroless has no shell", in.Line, s.Name)
	}
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, path("Dockerfile"))
	named := byName(stages)
	final := stages[len(stages)-1]
	if final.Name != "idemgate" {
		t.Errorf("Dockerfile: last (default) stage is %q, want idemgate", final.Name)
	}
	checkRuntimeStage(t, final)

	// The binary in the final image comes from a stage building ./cmd/idemgate.
	froms := copiedFrom(final)
	if len(froms) != 1 {
		t.Fatalf("Dockerfile: final stage copies from %v, want exactly one build stage", froms)
	}
	checkGoBuildStage(t, named, froms[0], "./cmd/idemgate")

	var entrypoint, cmd, health []string
	for _, in := range final.Instr {
		switch in.Cmd {
		case "ENTRYPOINT":
			entrypoint = execForm(t, in, in.Args)
		case "CMD":
			cmd = execForm(t, in, in.Args)
		case "HEALTHCHECK":
			// Options first, then CMD in exec form (a shell form would need
			// /bin/sh, which the image lacks).
			_, after, ok := strings.Cut(in.Args, "CMD ")
			if !ok {
				t.Fatalf("Dockerfile:%d: HEALTHCHECK without CMD", in.Line)
			}
			health = execForm(t, in, strings.TrimSpace(after))
		}
	}
	if !slices.Equal(entrypoint, []string{"/idemgate"}) {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want [/idemgate]", entrypoint)
	}
	if !slices.Equal(cmd, []string{"serve", "--config", "/etc/idemgate/config.yaml"}) {
		t.Errorf("Dockerfile: CMD %q, want [serve --config /etc/idemgate/config.yaml]", cmd)
	}
	if len(health) < 2 || health[0] != "/idemgate" || health[1] != "healthcheck" {
		t.Errorf("Dockerfile: HEALTHCHECK CMD %q, want [/idemgate healthcheck ...]", health)
	}
	if !slices.Contains(copiedTargets(final), "/idemgate") {
		t.Errorf("Dockerfile: final stage does not COPY the binary to /idemgate")
	}

	// EXPOSE matches the ports the container configs listen on.
	exposed := exposedPorts(t, final)
	for _, cfg := range containerConfigs(t) {
		for key, addr := range map[string]string{"listen": cfg.loaded.Listen, "admin.listen": cfg.loaded.Admin.Listen} {
			p := listenPort(t, cfg.where, addr)
			if !slices.Contains(exposed, p) {
				t.Errorf("Dockerfile: EXPOSE %v lacks %d (%s %s)", exposed, p, cfg.where, key)
			}
		}
	}

	// The exampleapi target for compose.
	ex, ok := named["exampleapi"]
	if !ok {
		t.Fatal("Dockerfile: no exampleapi stage (docker build --target exampleapi)")
	}
	checkRuntimeStage(t, ex)
	var built bool
	for _, from := range copiedFrom(ex) {
		s := named[from]
		for _, a := range ancestry(named, s) {
			for _, in := range a.find("RUN") {
				built = built || strings.Contains(in.Args, "./cmd/exampleapi")
			}
		}
	}
	if !built {
		t.Error("Dockerfile: exampleapi stage copies no binary built from ./cmd/exampleapi")
	}

	// Every COPY --from names an earlier stage.
	for i, s := range stages {
		for _, from := range copiedFrom(s) {
			if !slices.ContainsFunc(stages[:i], func(x stage) bool { return x.Name == from }) {
				t.Errorf("Dockerfile stage %s: COPY --from=%s names no earlier stage", s.Name, from)
			}
		}
	}

	// Nothing is downloaded by a build step: dependencies come through the
	// Go module proxy via go mod download only.
	fetch := regexp.MustCompile(`\b(curl|wget)\b|https?://`)
	for _, s := range stages {
		for _, in := range s.Instr {
			if (in.Cmd == "RUN" || in.Cmd == "ADD") && fetch.MatchString(in.Args) {
				t.Errorf("Dockerfile:%d: %s downloads from a host: %s", in.Line, in.Cmd, in.Args)
			}
		}
	}
}

// copiedTargets returns the destination of every COPY in s.
func copiedTargets(s stage) []string {
	var out []string
	for _, in := range s.find("COPY") {
		f := strings.Fields(in.Args)
		out = append(out, f[len(f)-1])
	}
	return out
}

// exposedPorts returns the ports of every EXPOSE in s.
func exposedPorts(t *testing.T, s stage) []int {
	t.Helper()
	var out []int
	for _, in := range s.find("EXPOSE") {
		for _, f := range strings.Fields(in.Args) {
			p, _, _ := strings.Cut(f, "/")
			n, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("Dockerfile:%d: EXPOSE %s: %v", in.Line, f, err)
			}
			out = append(out, n)
		}
	}
	return out
}

func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(path(".dockerignore"))
	if err != nil {
		t.Fatalf("read .dockerignore: %v", err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
		}
	}
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore must exclude .git (history and credentials stay out of the context)")
	}
	// What the build stage needs must stay in the context.
	for _, need := range []string{"go.mod", "go.sum", "cmd", "*.go", "**/*.go", "store", "policy", "proxy"} {
		if slices.Contains(patterns, need) {
			t.Errorf(".dockerignore excludes %s, which go build needs", need)
		}
	}
}

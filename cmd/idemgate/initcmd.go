package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/config/fromopenapi"
)

const initUsage = `usage:
  idemgate init --from-openapi SPEC [--out FILE] [--upstream URL] [--store memory|bolt|valkey|postgres] [--tombstones]
  idemgate init --from-openapi SPEC --check --config FILE
SPEC is an OpenAPI 3.0/3.1 or Swagger 2.0 description, YAML or JSON, or - for standard input.
`

// initCommand is `idemgate init`: the configuration from an OpenAPI
// description (config/fromopenapi), or with --check the drift between a
// description and a configuration. Exit 0: written, or no drift; 1: an
// unreadable description or config, or drift; 2: usage.
func initCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, initUsage); fs.PrintDefaults() }
	spec := fs.String("from-openapi", "", "OpenAPI or Swagger description file, or - for standard input")
	out := fs.String("out", "", "write the configuration to FILE instead of standard output")
	upstream := fs.String("upstream", "", "upstream.url, instead of the description's first server")
	store := fs.String("store", "memory", "store driver: memory, bolt, valkey or postgres")
	tombstones := fs.Bool("tombstones", false, "write proposed tombstone rules (resource_from: location) instead of comments")
	check := fs.Bool("check", false, "compare --config with the description instead of writing one")
	cfgPath := fs.String("config", "", "with --check: the configuration to compare")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *spec == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "idemgate init: --from-openapi SPEC is required\n%s", initUsage)
		return 2
	}
	if *check != (*cfgPath != "") {
		fmt.Fprintf(stderr, "idemgate init: --check and --config FILE go together\n%s", initUsage)
		return 2
	}
	var data []byte
	var err error
	if *spec == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(*spec)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemgate init: reading the description: %v\n", err)
		return 1
	}
	doc, err := fromopenapi.Read(data)
	if err != nil {
		fmt.Fprintf(stderr, "idemgate init: %s: %v\n", *spec, err)
		return 1
	}
	if *check {
		return initCheck(doc, *spec, *cfgPath, stdout, stderr)
	}
	plan, err := fromopenapi.Generate(doc, fromopenapi.Options{Upstream: *upstream, Store: *store, Tombstones: *tombstones, Source: filepath.Base(*spec)})
	if err != nil {
		fmt.Fprintf(stderr, "idemgate init: %v\n", err)
		return 2
	}
	var buf bytes.Buffer
	if err := plan.Render(&buf); err != nil {
		fmt.Fprintf(stderr, "idemgate init: %v\n", err)
		return 1
	}
	// The promise is a file validate accepts as written: load it as serve
	// would (environment aside) before handing it over.
	if _, err := config.Parse(buf.Bytes(), nil); err != nil {
		fmt.Fprintf(stderr, "idemgate init: the generated configuration does not load (a bug in init; please report it with the description):\n  - %s\n",
			strings.ReplaceAll(err.Error(), "\n", "\n  - "))
		return 1
	}
	if *out == "" {
		_, err = stdout.Write(buf.Bytes())
	} else {
		err = os.WriteFile(*out, buf.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idemgate init: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "idemgate init: %s\n", plan.Summary())
	for _, s := range plan.Skipped {
		fmt.Fprintf(stderr, "  skipped %s %s: %s\n", s.Op.Method, s.Op.Path, s.Reason)
	}
	for _, w := range doc.Warnings {
		fmt.Fprintf(stderr, "  read partly: %s\n", w)
	}
	if strings.HasPrefix(plan.UpstreamNote, "REVIEW") {
		fmt.Fprintf(stderr, "  upstream.url %s is a placeholder: the description names no absolute server; pass --upstream URL\n", plan.Upstream)
	}
	return 0
}

// initCheck prints the drift between the description and the
// configuration at path; exit 1 when there is any.
func initCheck(doc *fromopenapi.Document, spec, path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "idemgate init --check: %s is invalid:\n  - %s\n", path, strings.ReplaceAll(err.Error(), "\n", "\n  - "))
		return 1
	}
	d := fromopenapi.Check(doc, cfg.Policy)
	if d.Empty() {
		fmt.Fprintf(stdout, "%s enforces every unsafe operation of %s, and each of its routes matches one\n", path, spec)
		return 0
	}
	if len(d.Unenforced) > 0 {
		fmt.Fprintf(stdout, "unsafe operations %s does not enforce (%d):\n", path, len(d.Unenforced))
		for _, l := range d.Unenforced {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
	}
	if len(d.Orphans) > 0 {
		fmt.Fprintf(stdout, "routes matching no operation of %s (%d):\n", spec, len(d.Orphans))
		for _, l := range d.Orphans {
			fmt.Fprintf(stdout, "  %s\n", l)
		}
	}
	return 1
}

// Package config loads and validates idemgate's YAML configuration into a
// Config with a compiled policy. Every shape reads the same file: the
// binary with Load and its command-line flags (WithOverrides), the Go
// middleware and the Caddy module with InProcess, which asks for no
// upstream.url since the wrapped handler is the upstream.
//
// A key's value comes from its override (a flag), else its environment
// variable (EnvPrefix and the key path, as IDEMGATE_STORE_VALKEY_ADDRS),
// else the file, else its default. Load and Parse report every problem at
// once, each naming its key path (routes[1].lease), unknown keys included,
// and compile `defaults:` and `routes:` into a policy.Policy, so a Config
// they return is one the engine can serve. docs/configuration.md describes
// every key; config.example.yaml shows each with its default.
package config

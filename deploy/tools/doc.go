// Package tools pins the third-party tools the deploy tests run: Helm (the
// `tool` line in go.mod, `go tool helm`) and kustomize's Go API
// (./kustomize-build). It is a module of its own so that the idemgate module
// does not depend on Helm or Kubernetes libraries.
package tools

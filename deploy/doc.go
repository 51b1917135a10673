// Package deploy holds idemgate's deployment manifests (Docker Compose, Kubernetes, Grafana), whose tests check them against each other and the Dockerfile.
package deploy

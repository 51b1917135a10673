// Command kustomize-build renders a kustomization directory with the pinned
// sigs.k8s.io/kustomize/api (the library behind `kubectl kustomize`) and
// prints the resulting objects as YAML, so the deploy tests check the plain
// manifests the way `kubectl apply -k` would build them.
//
//	go run ./kustomize-build ../kubernetes
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kustomize-build DIR")
		os.Exit(2)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize-build:", err)
		os.Exit(1)
	}
	out, err := res.AsYaml()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize-build:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

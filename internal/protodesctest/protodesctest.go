// Package protodesctest writes protobuf descriptor sets for the tests of
// protobuf fingerprints, as protoc --descriptor_set_out would.
package protodesctest

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Write marshals files as one FileDescriptorSet into name in a temporary
// directory of t and returns its path; an error fails the test.
func Write(t testing.TB, name string, files ...*descriptorpb.FileDescriptorProto) string {
	t.Helper()
	b, err := proto.Marshal(&descriptorpb.FileDescriptorSet{File: files})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

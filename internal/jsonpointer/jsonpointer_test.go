package jsonpointer

import (
	"errors"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	for p, want := range map[string][]string{
		"/client_ts":       {"client_ts"},
		"/meta/request_id": {"meta", "request_id"},
		"/a~1b/m~0n":       {"a/b", "m~n"},
		"/~01":             {"~1"},
		"/":                {""},
		"/items/0":         {"items", "0"},
	} {
		got, err := Parse(p)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"", "client_ts", "/a~", "/a~2", "/\xff", "#/a"} {
		if _, err := Parse(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

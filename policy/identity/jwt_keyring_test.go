package identity

import (
	"reflect"
	"slices"
	"testing"
)

// TestSameJWTSettingsSeesEveryField: routes share a verifier only when
// their jwt settings verify alike, so a field added to JWTSettings that
// sameJWTSettings does not compare would let one route verify tokens with
// another's issuers or audiences.
func TestSameJWTSettingsSeesEveryField(t *testing.T) {
	base := JWTSettings{JWKSFile: "f", JWKSURL: "u", Issuers: []string{"i"}, Audiences: []string{"a"}, Claims: []string{"c"}}
	typ := reflect.TypeFor[JWTSettings]()
	for i := range typ.NumField() {
		other := base
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "-other")
		case reflect.Slice:
			f.Set(reflect.Append(reflect.ValueOf(slices.Clone(f.Interface().([]string))), reflect.ValueOf("other")))
		default:
			t.Fatalf("JWTSettings.%s is a %s: teach sameJWTSettings and this test to compare it", typ.Field(i).Name, f.Kind())
		}
		if sameJWTSettings(base, other) {
			t.Errorf("settings that differ in %s are the same to sameJWTSettings", typ.Field(i).Name)
		}
	}
	if !sameJWTSettings(base, base) {
		t.Error("equal settings differ")
	}
}

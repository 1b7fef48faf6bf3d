package compiler

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// addTool places the definition by the verified rewrite's own tree, without
// parsing the result again: every shape of tools it accepts gives valid
// JSON with def as the last tool, and the shapes it cannot place are
// refused.
func TestAddToolShapes(t *testing.T) {
	def := []byte(`{"name":"token_terminator","input_schema":{"type":"object"}}`)
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`{"messages":[],"tools":[{"name":"a"}]}`, `{"messages":[],"tools":[{"name":"a"},` + string(def) + `]}`, true},
		{`{"tools":[ ] ,"messages":[]}`, `{"tools":[ ` + string(def) + `] ,"messages":[]}`, true},
		{`{"messages":[]}`, `{"messages":[],"tools":[` + string(def) + `]}`, true},
		{`{ }`, `{ "tools":[` + string(def) + `]}`, true},
		{`{"messages":[],"tools":{"a":1}}`, "", false},
		{`[1]`, "", false},
	} {
		root, err := jsonv.Parse([]byte(tc.in), 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := addTool([]byte(tc.in), root, def)
		if (err == nil) != tc.ok {
			t.Fatalf("%s: err=%v, want ok=%v", tc.in, err, tc.ok)
		}
		if !tc.ok {
			if !errors.Is(err, errToolCheck) {
				t.Fatalf("%s: err=%v, want errToolCheck", tc.in, err)
			}
			continue
		}
		if string(got) != tc.want || !json.Valid(got) {
			t.Fatalf("%s:\ngot  %s\nwant %s", tc.in, got, tc.want)
		}
	}
	root, _ := jsonv.Parse([]byte(`{"tools":[]}`), 0)
	for _, bad := range []string{`{"name":`, `{} {}`, ``} {
		if _, err := addTool([]byte(`{"tools":[]}`), root, []byte(bad)); !errors.Is(err, errToolCheck) {
			t.Fatalf("def %q: err=%v, want errToolCheck", bad, err)
		}
	}
}

package caddymodule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// docRows returns the first word of each table row's first cell under the
// heading named section of a Markdown file, up to the next heading of the
// same or a higher level.
func docRows(t *testing.T, file, section string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\n"+section+"\n")
	if i < 0 {
		t.Fatalf("%s has no section %q", file, section)
	}
	text = text[i+len(section)+2:]
	level := strings.Repeat("#", strings.IndexByte(section, ' '))
	if j := regexp.MustCompile(`(?m)^#{1,` + itoa(len(level)) + `} `).FindStringIndex(text); j != nil {
		text = text[:j[0]]
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)[ `]").FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	return names
}

func itoa(n int) string { return string(rune('0' + n)) }

// TestConfigurationDocListsEverySubdirective: docs/configuration.md's
// subdirective table lists exactly what the Caddyfile parser accepts (its
// two tables), each once.
func TestConfigurationDocListsEverySubdirective(t *testing.T) {
	documented := docRows(t, "../docs/configuration.md", "## Subdirectives")
	var parsed []string
	for name := range subdirectives {
		parsed = append(parsed, name)
	}
	for name := range blockSubdirectives {
		parsed = append(parsed, name)
	}
	slices.Sort(parsed)
	seen := map[string]bool{}
	for _, name := range documented {
		if seen[name] {
			t.Errorf("docs/configuration.md lists %q twice", name)
		}
		seen[name] = true
		if !slices.Contains(parsed, name) {
			t.Errorf("docs/configuration.md lists %q, which the Caddyfile parser does not accept", name)
		}
	}
	for _, name := range parsed {
		if !seen[name] {
			t.Errorf("the Caddyfile parser accepts %q, which docs/configuration.md does not list", name)
		}
	}
}

// TestConfigurationDocListsVaultSubdirectives: every subdirective the vault
// backends' tables document is one that backend's parser knows (probed
// through the parser: an unknown name is refused as unrecognized).
func TestConfigurationDocListsVaultSubdirectives(t *testing.T) {
	for _, backend := range []string{"badger", "redis"} {
		documented := docRows(t, "../docs/configuration.md", "### `vault "+backend+" { … }`"+map[string]string{"badger": " (default)", "redis": ""}[backend])
		if len(documented) == 0 {
			t.Fatalf("no rows for vault %s", backend)
		}
		for _, name := range documented {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("token_terminator {\nvault " + backend + " {\n" + name + " x\n}\n}"))
			if err != nil && strings.Contains(err.Error(), "unrecognized") {
				t.Errorf("docs/configuration.md lists %q for vault %s, which its parser refuses: %v", name, backend, err)
			}
		}
	}
}

// TestReadmeListsEveryPassthroughReason: the README's table of pass-through
// reasons names every Reason constant, read from the source of both homes
// of reasons (the compiler's and the gateway's), and no other.
func TestReadmeListsEveryPassthroughReason(t *testing.T) {
	var reasons []string
	for _, file := range []string{"../internal/compiler/compiler.go", "../internal/gateway/reasons.go"} {
		found := reasonConstants(t, file)
		if len(found) < 5 {
			t.Fatalf("found only %d Reason constants in %s", len(found), file)
		}
		reasons = append(reasons, found...)
	}
	if len(reasons) < 20 {
		t.Fatalf("found only %d Reason constants", len(reasons))
	}
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| (`[a-z_]+`(?:, `[a-z_]+`)*) \\|").FindAllStringSubmatch(string(data), -1) {
		for _, name := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row[1], -1) {
			listed[name[1]] = true
		}
	}
	for _, r := range reasons {
		if !listed[r] {
			t.Errorf("the README's pass-through table does not list %q", r)
		}
		delete(listed, r)
	}
	for name := range listed {
		t.Errorf("the README's pass-through table lists %q, which is no compiler.Reason", name)
	}
}

// reasonConstants are the values of the constants of type Reason (or
// compiler.Reason) declared in file.
func reasonConstants(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			switch typ := vs.Type.(type) {
			case *ast.Ident:
				if typ.Name != "Reason" {
					continue
				}
			case *ast.SelectorExpr:
				if typ.Sel.Name != "Reason" {
					continue
				}
			default:
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					reasons = append(reasons, s)
				}
			}
		}
	}
	return reasons
}

package tokenterminator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of non-test code may be, from
// its signature to its closing brace, unless its doc comment has a line
// "Long: <why splitting it would hurt>".
const maxFuncLines = 80

// funcLenPending are the trees whose long functions are being split
// elsewhere; they leave this list as those changes land.
var funcLenPending = []string{}

// TestFunctionLength keeps functions short enough to read in one screen:
// a longer one needs its reason in its doc comment.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		slash := filepath.ToSlash(path)
		for _, p := range funcLenPending {
			if strings.HasPrefix(slash, p) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines && !longReason(fd.Doc) {
				t.Errorf("%s: %s is %d lines (at most %d, or a \"Long: why\" line in its doc comment)",
					fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func longReason(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, line := range strings.Split(doc.Text(), "\n") {
		if r, ok := strings.CutPrefix(line, "Long: "); ok && strings.TrimSpace(r) != "" {
			return true
		}
	}
	return false
}

// Package readme checks that every Go sample of the repository's README is
// the body of an Example function, so that the sample compiles wherever
// its module's tests run.
package readme

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository root, from this package's directory.
const root = "../.."

// block is one ```go block of the README.
type block struct {
	line  int      // of the opening fence, 1-based
	lines []string // normalized
	raw   []string // as written, for messages
}

// example is the body of one Example function, a line per element.
type example struct {
	name  string // file and function, for messages
	lines []string
}

// TestSamplesAreExamples requires, for each ```go block of README.md, an
// Example function in some example_test.go of the repository whose body
// holds every code line of the block, in order; lines in between are
// allowed. Lines are compared as Go tokens, so comments and spacing do not
// count. A line that is only an elision ("...", or "{ ... }" in it) is
// skipped: better, write the sample without one.
func TestSamplesAreExamples(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(readme)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block: the parser or the README changed")
	}
	examples := findExamples(t)
	if len(examples) == 0 {
		t.Fatal("no Example function found in any example_test.go")
	}
	for _, b := range blocks {
		if len(b.lines) == 0 {
			t.Errorf("README.md:%d: a ```go block with no code line", b.line)
			continue
		}
		var best example
		bestN := -1
		for _, e := range examples {
			if n := matched(b.lines, e.lines); n > bestN {
				best, bestN = e, n
			}
		}
		if bestN == len(b.lines) {
			t.Logf("README.md:%d: %s", b.line, best.name)
			continue
		}
		t.Errorf("README.md:%d: no Example function holds this ```go block's lines in order; "+
			"add one in the package the sample uses (in its module), or fix the sample. "+
			"Closest: %s, which lacks %q", b.line, best.name, b.raw[bestN])
	}
}

// goBlocks returns the README's ```go blocks, each line normalized, code
// lines only.
func goBlocks(readme []byte) []block {
	var (
		blocks []block
		cur    *block
	)
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{line: n}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			if l := normalize(line); l != "" && !elision(l) {
				cur.lines = append(cur.lines, l)
				cur.raw = append(cur.raw, strings.TrimSpace(line))
			}
		}
	}
	return blocks
}

func elision(l string) bool {
	return l == "..." || strings.Contains(l, "{ ... }")
}

// findExamples parses every example_test.go of the repository, every
// module included, skipping what the go command skips (testdata, and
// directories starting with "." or "_").
func findExamples(t *testing.T) []example {
	t.Helper()
	var examples []example
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "example_test.go" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
			e := example{name: fmt.Sprintf("%s %s", filepath.ToSlash(rel), fn.Name.Name)}
			for _, line := range strings.Split(string(body), "\n") {
				if l := normalize(line); l != "" {
					e.lines = append(e.lines, l)
				}
			}
			examples = append(examples, e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return examples
}

// matched returns how many of want, from the first, occur in have in
// order.
func matched(want, have []string) int {
	n := 0
	for _, h := range have {
		if n < len(want) && h == want[n] {
			n++
		}
	}
	return n
}

// normalize returns line's Go tokens separated by single spaces, without
// comments or the semicolons the scanner inserts, so that gofmt's spacing
// (10*time.Second in one place, 10 * time.Second in another) and trailing
// comments do not matter.
func normalize(line string) string {
	src := []byte(line)
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile("", -1, len(src)), src, func(token.Position, string) {}, 0)
	var toks []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue
		}
		if lit == "" {
			lit = tok.String()
		}
		toks = append(toks, lit)
	}
	return strings.Join(toks, " ")
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{give: "\trt := m.Stack(10 * time.Second)(base) // plain net/http", want: "rt := m . Stack ( 10 * time . Second ) ( base )"},
		{give: "rt := m.Stack(10*time.Second)(base)", want: "rt := m . Stack ( 10 * time . Second ) ( base )"},
		{give: `u := "https://example.com" // a URL`, want: `u := "https://example.com"`},
		{give: "// only a comment", want: ""},
		{give: "if err != nil { ... }", want: "if err != nil { ... }"},
	}
	for _, tt := range tests {
		if got := normalize(tt.give); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestMatched(t *testing.T) {
	have := []string{"a", "x", "b", "c"}
	tests := []struct {
		give []string
		want int
	}{
		{give: []string{"a", "b", "c"}, want: 3}, // lines in between are allowed
		{give: []string{"b", "a"}, want: 1},      // order counts
		{give: []string{"a", "d"}, want: 1},
	}
	for _, tt := range tests {
		if got := matched(tt.give, have); got != tt.want {
			t.Errorf("matched(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}
